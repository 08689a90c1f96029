// Package dhcp is the DHCPv4 server of kubefarm-pxe.
//
// It answers the machines it knows (a MAC in the lease table) with their
// static address and a boot file chosen by package bootfile. A MAC of no
// Machine is ignored, so that the server can share a network with other
// DHCP servers without handing out addresses it does not own, unless a
// Dynamic allocator is configured (package pxe/dynamic: a NodePool's
// catch-all range) and the server is authoritative: then the allocator
// leases it an address of the range.
//
// The answer path, from the socket in:
//
//   - Server.Serve: the socket loop. One reader per socket fills a fixed
//     queue that a fixed number of workers drain; when the queue is full the
//     packet is dropped and counted, so a flood costs bounded memory and
//     never a goroutine per packet. Past half the queue the reader sheds
//     DISCOVERs before parsing them, so that REQUESTs complete
//     (overload.go).
//   - Server.handle, on a worker: one parse, one O(1) lookup in the lease
//     table. A known machine is answered at once. An unknown MAC that the
//     allocator may serve is handed, parsed, to DynamicWorkers goroutines
//     fed by a queue of DynamicQueue requests, because the allocator makes
//     API calls; when that queue is full it is dropped and counted.
//   - decide (pure for a known machine; Reply is its exported form): the
//     request, the source of its lease and Config -> the OFFER, ACK or NAK
//     to send, or an error saying why nothing is sent. It has one
//     message-type switch for both kinds of client; the source (the table's
//     lease, or the allocator, within DynamicTimeout) is all that differs.
//   - Every reason for not answering is an *OutcomeError naming its
//     Outcome, the "result" label of the packet counter: Reply's sentinels
//     and the allocator's errors alike, so this package imports no
//     allocator. Any other error is a failure ("error").
//
// Server.HandlePacket runs the same path inline (raw bytes in -> bytes,
// destination and outcome out); it is what the fuzz target drives.
//
// Knobs (Config): ServerID (option 54 and the source of replies), Boot
// (bootfile.Config: where TFTP/HTTP boot answer, x86-64 UEFI binary),
// ProxyDHCP (answer PXE clients with boot options only, leaving addresses
// to another DHCP server; the server then also listens on port 4011 and
// never allocates), Workers and QueueSize, Events (the machines' Events),
// and Dynamic with DynamicWorkers (4), DynamicQueue (64) and DynamicTimeout
// (3 s, the deadline of each allocator call and its only bound).
//
// Replies go where RFC 2131 section 4.1 says: to the relay (giaddr, port 67)
// when relayed; to ciaddr when the client has an address; broadcast
// otherwise. A client that asks for unicast before it has an address gets
// a broadcast too, which the RFC allows and which avoids writing ARP entries.
package dhcp

// Package dhcp is the DHCPv4 server of kubefarm-pxe.
//
// It answers only the machines it knows (a MAC in the lease table) with
// their static address and a boot file chosen by package bootfile; every
// other client is ignored, so that it can share a network with other DHCP
// servers without handing out addresses it does not own.
//
// The package has three layers, each usable alone:
//
//   - Reply (pure): one request + the client's lease + Config -> the OFFER,
//     ACK or NAK to send, or a sentinel error saying why nothing is sent.
//     It is a chain of small Handlers that each add one group of options.
//   - Server.Handle (pure apart from the lease lookup): raw bytes in ->
//     bytes and destination out, with the outcome for metrics. This is what
//     the fuzz target drives.
//   - Server.Serve: the socket loop. One reader per socket fills a fixed
//     queue that a fixed number of workers drain; when the queue is full the
//     packet is dropped and counted, so a flood costs bounded memory and
//     never a goroutine per packet.
//
// Knobs (Config): ServerID (option 54 and the source of replies), Boot
// (bootfile.Config: where TFTP/HTTP boot answer, x86-64 UEFI binary),
// ProxyDHCP (answer PXE clients with boot options only, leaving addresses
// to another DHCP server; the server then also listens on port 4011),
// Workers and QueueSize.
//
// Replies go where RFC 2131 section 4.1 says: to the relay (giaddr, port 67)
// when relayed; to ciaddr when the client has an address; broadcast
// otherwise. A client that asks for unicast before it has an address gets
// a broadcast too, which the RFC allows and which avoids writing ARP entries.
package dhcp

// Package discoveryflood is the flood test of kubefarm-pxe's discovery
// (docs/discovery.md): "10,000 random MACs asking to be discovered leave
// at most the configured number of objects and kubefarm-pxe's resident
// memory within its target".
//
// The real kubefarm-pxe binary runs in a network namespace of its own
// (its own loopback, so its DHCP socket on lo collides with no other
// test's), reaching a real API server (internal/testing/testenv) through a
// forwarder, with --discovery and --discovery-max-machines 50 (and a
// --discovery-rate that never binds: the cap must hold the count by
// itself; pxe/server's TestDiscoveryAPI tests the rate). One
// NodePool, unknownMachines Hold, has a catch-all range of 65,521
// addresses in 127.80.0.0/16 (the subnet is 127.0.0.0/8, so the server's
// own 127.0.0.1 selects it).
//
// Two floods, honestly different:
//
//   - DHCP, the faithful path, 100 random MACs: each gets its address
//     from kubefarm-pxe itself (DISCOVER, OFFER, REQUEST, ACK over the
//     namespace's loopback: the client sends from 127.0.0.1 with ciaddr
//     set, so the OFFER comes back unicast; its REQUEST comes from the
//     offered address with that address as ciaddr, so the ACK does too),
//     which writes its DHCPLease, then reports from that address. The
//     first 50 reports are recorded, the other 50 refused with 429 by the
//     cap.
//   - HTTP, 10,000 random MACs: DORA for 10,000 MACs through the
//     allocator is 20,000 API writes, about two minutes here (100 take
//     1.2 s), too slow for `make test` on two cores, so their DHCPLeases are written by the test before the
//     replica starts (as the allocator writes them: the same pool, name
//     and fields), and each MAC then reports once from its own leased
//     address, 32 at a time. The cap is already full: every report must
//     be refused with 429, counted by result in
//     kubefarm_pxe_discovery_reports_total (refused_cap, or
//     refused_source_rate once the per-source table of 4,096 is full of
//     sources whose bucket has not refilled).
//
// It asserts that 50 DiscoveredMachines exist at the end, that the
// client's tally of 200 and 429 answers matches the replica's counters,
// and that the replica's resident set (procstat: VmRSS after the floods
// and VmHWM, its peak) stays under residentTarget, the chart's memory
// request for kubefarm-pxe (128 MiB), and its goroutines
// under goroutineTarget once the flood is over. Synchronisation is on
// answers only: /healthz (the cache, all 10,000 leases included, has
// synced), the DHCP replies, the HTTP answers.
package discoveryflood

// Package replicas is the acceptance test of kubefarm-pxe's replica model
// (see cmd/kubefarm-pxe): several replicas serve the same machines with no
// leader election, so "two replicas serving the same machines: a client gets
// identical answers; killing one loses no boot."
//
// The test (replicas_test.go) runs one real API server (internal/testing/testenv)
// holding a BootImage, a NodePool and its Machines, and two real
// kubefarm-pxe processes, the binary built from cmd/kubefarm-pxe, in
// authoritative mode. Each replica has a network namespace of its own, as a
// hostNetwork pod on its own node would, joined by a veth pair to one
// bridge in a "LAN" namespace (10.78.0.0/24: the LAN namespace is 10.78.0.1,
// the gateway and the artifact origin; replica A is 10.78.0.2, replica B
// 10.78.0.3). Separate namespaces matter: in one namespace both replicas
// would bind 0.0.0.0:67 on the same interface, and the kernel would then
// pick one of the two sockets for unicast requests and one source address
// for both replicas' broadcasts, which no real deployment does. Both reach
// the API server through a forwarder listening on 127.0.0.1 in their own
// namespace.
//
// It asserts:
//
//   - Identical answers. A DHCP client written with dhcpv4 (a UDP socket
//     bound to its interface, which has no address yet) in a client
//     namespace on the bridge sends one DISCOVER per machine, as an
//     iPXE client, a BIOS PXE ROM and a UEFI PXE firmware. Both replicas
//     must OFFER, once each (their packet counters say so, which is how the
//     test knows it has seen every reply without waiting out a window), and
//     the two OFFERs must agree in every header field and option except
//     what is each replica's own address by design: the IP source address,
//     option 54 (server identifier), siaddr and option 66 (the TFTP next
//     server) and the host of an HTTP boot URL (file / option 67). Those
//     must be the replica's own address. The values are also checked
//     against the API objects. The iPXE scripts the two replicas serve for
//     the machine must agree up to their own base URL.
//   - Option 54 is honoured. A REQUEST naming one replica gets an ACK from
//     it (agreeing with its OFFER) and nothing from the other, whose
//     counter shows it ignored the request as another server's.
//   - Catch-all range. The pool has a dynamicRange of ten addresses
//     holding the three static machines' addresses. A DISCOVER from a MAC
//     of no Machine gets an OFFER from each replica, identical but for
//     their own address, with the address its search order gives (FNV-1a
//     of the MAC modulo the range size, upwards, static addresses
//     skipped; the test computes it independently), and exactly one
//     DHCPLease object exists for it, held for the offer hold; the REQUEST
//     naming A is ACKed by A alone (B counts it as another server's) and
//     moves the same object's expiry to the pool's lease time. A second
//     stranger, whose search starts on a static address, gets the next
//     free one; five more take the rest of the range, and the next
//     stranger gets no OFFER from either replica (range full): the seven
//     DHCPLeases then hold every non-static address and no static one.
//   - Killing one loses no boot. Replica A is killed (SIGKILL). Then busybox
//     udhcpc, as a BIOS PXE ROM, leases from B and fetches undionly.kpxe
//     over TFTP from the lease's next server; as iPXE it leases again and
//     fetches the iPXE script from the lease's boot URL and the kernel the
//     script names, all from B. A machine whose lease came from A rebinds
//     (REQUEST broadcast, ciaddr set, no server identifier) and B ACKs the
//     same address. The lease A acknowledged to the stranger lives in the
//     API: B NAKs another MAC's INIT-REBOOT REQUEST for it, and ACKs the
//     stranger's (option 50, no server identifier) with the same address
//     without rewriting the object (same resourceVersion), since the
//     expiry A wrote leaves more than half the lease time. (A MAC with no
//     lease asking for a free address gets silence, RFC 2131 4.3.2; that is
//     tested in pxe/dynamic.)
//
// Synchronisation is on events only: /healthz and the boot scripts
// answering, replies arriving, and the replicas' packet counters.
package pxereplicas

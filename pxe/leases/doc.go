// Package leases holds the DHCP leases kubefarm-pxe hands out: one static
// lease per boot MAC of every Machine, derived from the Machine and its
// NodePool, and the Lease and Network types that package pxe/dynamic builds
// the leases of a pool's catch-all range from (Network.Lease; Lease.Dynamic
// marks them). Dynamic leases live in DHCPLease objects, not in the Table.
//
// The Table answers a lookup by MAC in O(1) without allocating, under any
// number of concurrent readers, because it sits on the DHCP hot path. It is
// also indexed by static IP (LookupIP), so that the catch-all allocator
// never hands out a Machine's address. Writes replace all leases of one
// machine at once, so a change of MACs or IPs never leaves a stale key
// behind.
//
// FromObjects is the pure builder (Machine + NodePool -> leases); NetworkOf
// parses a pool's spec.network once for both builders, and TagOptions
// resolves a machine's tags into DHCP options. kubefarm-pxe itself serves
// its static leases from pxe/inventory, which builds each on lookup from a
// compact record of the Machine (FromObjects is its reference:
// TestLeaseIsThePureBuilders); the Table holds leases given to it, for
// tests, the in-process benchmark and any caller with leases in hand.
package leases

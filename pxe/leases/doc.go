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
// parses a pool's spec.network once for both builders. Syncer keeps a Table
// in step with a controller-runtime cache; when the API server goes away,
// the informers stop delivering events and the Table keeps serving what it
// last knew, which is the point: machines must keep booting while the admin
// cluster is down.
package leases

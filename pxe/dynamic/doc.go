// Package dynamic is the catch-all range of kubefarm-pxe: a NodePool with
// spec.network.dynamicRange gives MACs of no Machine an address on its
// network, for discovery and inventory. Such a client gets the address, the
// pool's network options and the boot options; it has no Machine, so its
// boot script is what the pool's unknownMachines and kubefarm-pxe's
// --discovery make of it (pxe/httpboot's DecideUnclaimed, which finds the
// lease with LeaseOfMAC; POST /discovery checks its sender with LeaseOfIP:
// lookup.go, cache reads only, with this replica's own writes the watch has
// not shown yet: written.go).
//
// Replicas of kubefarm-pxe run at once with no leader, so a lease cannot
// live in one replica's memory. It is a DHCPLease object in the pool's
// namespace, named <pool>-a-b-c-d after its address, and the API server
// arbitrates:
//
//   - Claim = Create. One address of a pool has one object name, so of
//     two replicas claiming it at once one gets AlreadyExists. That one
//     then reads the object from the API server (not its cache, which may
//     not have it yet): the same MAC means both served the same client and
//     it uses the lease; an expired lease is taken over with an Update
//     carrying the resourceVersion it read (a Conflict means someone else
//     was first: next address); anything else: next address.
//   - Same order everywhere. A MAC's search starts at FNV-1a(MAC) modulo
//     the range size and probes upwards, skipping the subnet's network and
//     broadcast addresses and every static machine IP (Config.Static's
//     LookupIP: pxe/inventory in kubefarm-pxe). Two replicas serving one
//     DISCOVER therefore try the same addresses in the same order and meet
//     on the same object, so a MAC ends up with one lease and one address.
//   - The cache only saves work. A MAC's existing lease is found through a
//     cache index (spec.mac), and addresses the cache knows to be held by
//     another MAC are skipped (spec.ip) without an API call; a stale cache
//     costs an extra API call, or at worst a spare claim that lapses after
//     OfferHold. Correctness comes from Create and Update preconditions.
//   - Bounded. One call makes at most MaxAttempts claims (32) and lasts
//     no longer than its context: the DHCP server gives each call 3 s
//     (dhcp.DefaultDynamicTimeout, below a client's first retransmission),
//     and the allocator adds no deadline of its own. A range with no free
//     address, or none found within MaxAttempts, is ErrRangeFull.
//
// Lifetimes: an OFFER holds a new address for OfferHold (60 s), with no
// spec.boundTime. A REQUEST (Ack) sets expireTime to now + the pool's lease
// time and, on the first ACK of an offer, boundTime to now: the lease is
// bound, the record the NodePool controller makes a catch-all Machine from
// (unknownMachines Join), with no guessing from the time left. A renewal
// writes only once less than half of the lease time remains, so a client
// renewing at T1 writes about once per lease time and a renewal in between
// is answered from the cache; it keeps boundTime, which therefore says when
// the client took the address, not when a renewal last happened to write.
// An ACK that revives a lapsed (or once declined) lease sets boundTime
// afresh. Taking an expired lease over, for another MAC or as a new offer
// to the same one, clears boundTime: that client has not been acknowledged
// yet. A RELEASE deletes the object with UID and resourceVersion
// preconditions. A DECLINE (the address is in use by another host) marks
// the lease declined for one lease time and clears boundTime: nobody, the
// declining MAC included, is offered the address meanwhile. Expired leases
// stay until another MAC needs the address; the owner reference to the
// NodePool has them garbage-collected with the pool.
//
// Which pool serves a packet: the one whose subnet contains the relay
// address (giaddr) when the packet was relayed, else the server's own
// address; the longest prefix wins, then namespace/name order. No such pool
// is ErrNoPool and the DHCP server ignores the MAC as it would without
// ranges.
//
// Errors: ErrNoPool, ErrRangeFull, ErrNotLeased and ErrNoRecord are
// dhcp.OutcomeErrors, each naming what the DHCP server does (ignore, count
// a full range, NAK, stay silent); any other error is a failure.
//
// The pure part (ParseRange, Range.Candidates, LeaseName) is table-tested
// without a server; the Allocator is tested against a real API server with
// two allocators standing in for two replicas.
package dynamic

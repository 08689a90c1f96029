// Package inventory is kubefarm-pxe's table of Machines: one compact record
// per Machine (what the DHCP and boot handlers read of it, about a third of
// the decoded object) indexed by name, boot MAC and static IP, with the
// Machine's static DHCP lease derived against its NodePool.
//
// Every replica holds every Machine of the farm, so the record is what
// bounds its memory: the Machines are not kept in an informer cache at all.
// The Inventory is the store of a client-go Reflector on Machines, which
// hands it each decoded Machine once; the NodePools, a few per tenant, stay
// in the controller-runtime cache, and a pool's event derives its machines'
// leases again. A lease is built on each DHCP lookup from the record and
// its pool's parsed network (one allocation), and a Machine is rebuilt on
// each boot request (ByMAC, ByIP) from its record, so neither is stored per
// machine.
//
// When the API server goes away the reflector retries and the Inventory
// keeps answering with what it last knew: machines must keep booting while
// the admin cluster is down.
package inventory

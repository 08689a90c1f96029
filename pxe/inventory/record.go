package inventory

import (
	"net"
	"net/netip"
	"slices"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/leases"
)

// record is what kubefarm-pxe keeps of one Machine: about a third of the
// decoded object, which it never holds past the event that carried it.
// Records are immutable: an update builds a new one, so a reader holding
// one (a lease being built, a Machine being rebuilt) never sees it change.
type record struct {
	key             types.NamespacedName // the namespace shared with the others
	uid             types.UID
	resourceVersion string

	// macs are the boot MACs, parsed; ip the static address, parsed. A
	// Machine whose spec holds an address that does not parse keeps it
	// in the text fields only (spec validation normally refuses it).
	macs []mac
	ip   ipv4
	// text keeps the spec's address strings only where they are not what
	// the parsed form prints back (the API admits only the canonical
	// forms, so this is normally nil).
	text *addressText

	// The rest of the spec; pool, cluster and image strings shared between
	// the records.
	pool, cluster, hostname, desiredImage string
	tags                                  []string

	// status is what the boot handlers read of it (nil when empty):
	// lastBoot and every condition whole, since the boot report's merge
	// patch is computed from the rebuilt Machine (see keptStatus).
	status *kubefarmv1.MachineStatus

	// dhcp is the static lease's part this Machine adds to its pool's:
	// valid once derived against the pool, kept from the last good
	// derivation when a later spec or pool cannot derive one.
	dhcp facts
}

type mac [6]byte

type ipv4 struct {
	addr [4]byte
	ok   bool
}

type addressText struct {
	macs []string
	ip   string
}

// facts are the per-machine inputs of its static lease; the pool gives the
// rest (pool.network).
type facts struct {
	valid    bool
	ip       [4]byte
	hostname string
	options  []leases.Option // shared by the pool's machines with the same tags
	pool     *poolState
}

// newRecord compacts m; m is not referenced afterwards.
func newRecord(m *kubefarmv1.Machine) *record {
	r := &record{
		key:             types.NamespacedName{Namespace: shared(m.Namespace), Name: m.Name},
		uid:             m.UID,
		resourceVersion: m.ResourceVersion,
		pool:            shared(m.Spec.Pool),
		cluster:         shared(m.Spec.Cluster),
		hostname:        m.Spec.Hostname,
		desiredImage:    shared(m.Spec.DesiredImage),
		status:          keptStatus(m.Status),
	}
	if len(m.Spec.Tags) > 0 {
		r.tags = m.Spec.Tags
	}
	canonical := true
	r.macs = make([]mac, 0, len(m.Spec.MACs))
	for _, s := range m.Spec.MACs {
		hw, err := net.ParseMAC(s)
		if err != nil || len(hw) != 6 || hw.String() != s {
			canonical = false
			if err != nil || len(hw) != 6 {
				continue
			}
		}
		r.macs = append(r.macs, mac(hw))
	}
	if a, err := netip.ParseAddr(m.Spec.IP); err == nil && a.Is4() {
		r.ip = ipv4{addr: a.As4(), ok: true}
		canonical = canonical && a.String() == m.Spec.IP
	} else if m.Spec.IP != "" {
		canonical = false
	}
	if !canonical {
		r.text = &addressText{macs: slices.Clone(m.Spec.MACs), ip: m.Spec.IP}
	}
	return r
}

// keptStatus is the part of a Machine's status kubefarm-pxe reads, nil when
// there is none. Dropped, because only kubefarm-manager reads them:
// status.history (up to ten finished updates) and, of status.rollout,
// everything but the phase and the previous boot ID the heartbeat's reboot
// signal compares. Kept whole: status.lastBoot and every condition, because
// the boot report's merge patch is the difference between the rebuilt
// Machine and a copy with lastBoot and conditions set, so a condition
// missing here would be deleted on the server
// (TestRebuiltMachineWritesTheSamePatch).
func keptStatus(s kubefarmv1.MachineStatus) *kubefarmv1.MachineStatus {
	s.History = nil
	if r := s.Rollout; r != nil {
		s.Rollout = &kubefarmv1.MachineRollout{Phase: r.Phase, PreviousBootID: r.PreviousBootID}
	}
	if len(s.Conditions) == 0 && s.ServedImage == nil && s.LastBoot == nil && s.Rollout == nil {
		return nil
	}
	s.Conditions = slices.Clip(s.Conditions)
	return &s
}

// machine rebuilds the Machine as kubefarm-pxe reads it: the kept spec and
// status, and of the metadata the name, namespace, UID and resourceVersion
// (the boot report's optimistic lock). The caller owns it.
func (r *record) machine() *kubefarmv1.Machine {
	m := &kubefarmv1.Machine{
		TypeMeta: metav1.TypeMeta{APIVersion: kubefarmv1.GroupVersion.String(), Kind: "Machine"},
		ObjectMeta: metav1.ObjectMeta{Namespace: r.key.Namespace, Name: r.key.Name, UID: r.uid,
			ResourceVersion: r.resourceVersion},
		Spec: kubefarmv1.MachineSpec{Pool: r.pool, Cluster: r.cluster, Hostname: r.hostname,
			MACs: r.macStrings(), IP: r.ipString(), Tags: slices.Clone(r.tags), DesiredImage: r.desiredImage},
	}
	if r.status != nil {
		m.Status = *r.status.DeepCopy()
	}
	return m
}

// addresses are the IPs the Machine is known by: its spec's, and the one
// its lease hands out when that differs (the last good lease, kept while
// its spec cannot derive one): the machine's requests come from it, and
// the catch-all allocator must not hand it out.
func (r *record) addresses() [][4]byte {
	var out [][4]byte
	if r.ip.ok {
		out = append(out, r.ip.addr)
	}
	if r.dhcp.valid && (!r.ip.ok || r.dhcp.ip != r.ip.addr) {
		out = append(out, r.dhcp.ip)
	}
	return out
}

func (r *record) macStrings() []string {
	if r.text != nil {
		return slices.Clone(r.text.macs)
	}
	if len(r.macs) == 0 {
		return nil
	}
	out := make([]string, len(r.macs))
	for i := range r.macs {
		out[i] = net.HardwareAddr(r.macs[i][:]).String()
	}
	return out
}

func (r *record) ipString() string {
	if r.text != nil {
		return r.text.ip
	}
	if !r.ip.ok {
		return ""
	}
	return netip.AddrFrom4(r.ip.addr).String()
}

// shared returns one canonical copy of v (unique.Make: a copy is dropped
// once no record holds it, so the images of past rollouts do not
// accumulate).
func shared(v string) string {
	if v == "" {
		return v
	}
	return unique.Make(v).Value()
}

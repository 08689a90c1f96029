// Package build holds the pure builders of the NodePool controller: a NodePool
// goes in, the Machine objects it stands for come out.
//
// It exists apart from the reconciler so that what a pool means can be
// table-tested without an API server, and so that the reconciler can
// server-side apply the result on every pass: nothing here reads a clock, a
// random source or the API, and no map is iterated in Go's random order, so
// the same pool always yields byte-identical Machines and an unchanged pool
// never causes a write.
//
// Only the Machine's metadata and spec are built. Its status belongs to the
// rollout controller (which pins the first served image, machinestate.Target)
// and to the machine.
package desired

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/machineconfig"
)

// Label keys on every Machine beside kubefarm's own (kubefarmv1.LabelPool,
// by which the NodePool controller lists a pool's Machines to delete those
// whose entry is gone, and kubefarmv1.LabelTenantCluster, which selects a
// tenant's Machines without reading every pool). LabelManagedBy has the same
// key as on the tenant control plane's objects (controllers/tenantcluster/desired),
// so one selector finds everything of a tenant.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "kubefarm"
)

// Machines builds one Machine per entry of pool.spec.machines, in the order
// of the entries. The pool must carry its UID: every Machine has a controller
// owner reference to it, so deleting the pool deletes its Machines and the
// controller is woken by their changes.
//
// It fails, naming the pool and every bad entry, when a name would be
// invalid, a MAC or IP malformed or repeated, or a tag undefined. The API's
// validation rejects most of that already, but not all: a pool name of 64 to
// 253 characters is a valid object name, yet no label value, and with a long
// entry name no valid Machine name either. A half-built pool is worse than
// none, so nothing is returned on error.
func Machines(pool *kubefarmv1.NodePool) ([]*kubefarmv1.Machine, error) {
	if pool == nil {
		return nil, errors.New("a pool is required")
	}
	id := pool.Namespace + "/" + pool.Name
	if pool.Name == "" || pool.Namespace == "" || pool.UID == "" {
		return nil, fmt.Errorf("pool %q: name, namespace and UID are required to own Machines", id)
	}
	var errs []error
	for _, msg := range validation.IsValidLabelValue(pool.Name) {
		errs = append(errs, fmt.Errorf("pool %s: name is not a valid label value for %s: %s", id, kubefarmv1.LabelPool, msg))
	}
	for _, msg := range validation.IsValidLabelValue(pool.Spec.Cluster) {
		errs = append(errs, fmt.Errorf("pool %s: cluster %q is not a valid label value for %s: %s", id, pool.Spec.Cluster, kubefarmv1.LabelTenantCluster, msg))
	}
	if pool.Spec.Cluster == "" || pool.Spec.BootImage == "" {
		errs = append(errs, fmt.Errorf("pool %s: spec.cluster and spec.bootImage are required", id))
	}

	owner := ownerRef(pool)
	seenName := map[string]bool{}
	seenMAC := map[string]string{}
	out := make([]*kubefarmv1.Machine, 0, len(pool.Spec.Machines))
	for i := range pool.Spec.Machines {
		e := &pool.Spec.Machines[i]
		m, err := machine(pool, e, owner, seenName, seenMAC)
		if err != nil {
			errs = append(errs, fmt.Errorf("pool %s, machine %q: %w", id, e.Name, err))
			continue
		}
		out = append(out, m)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// ownerRef is the controller reference of pool's Machines.
func ownerRef(pool *kubefarmv1.NodePool) metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{
		APIVersion:         kubefarmv1.GroupVersion.String(),
		Kind:               "NodePool",
		Name:               pool.Name,
		UID:                pool.UID,
		Controller:         &yes,
		BlockOwnerDeletion: &yes,
	}
}

func machine(pool *kubefarmv1.NodePool, e *kubefarmv1.MachineEntry, owner metav1.OwnerReference,
	seenName map[string]bool, seenMAC map[string]string) (*kubefarmv1.Machine, error) {
	// The entry name is the node's hostname: it must be a DNS label on its
	// own, not only as part of the Machine name.
	if msgs := validation.IsDNS1123Label(e.Name); len(msgs) > 0 {
		return nil, fmt.Errorf("name is not a valid hostname: %s", strings.Join(msgs, "; "))
	}
	if seenName[e.Name] {
		return nil, errors.New("name is used by two entries")
	}
	seenName[e.Name] = true
	name := machineconfig.MachineName(pool.Name, e.Name)
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return nil, fmt.Errorf("the Machine name %q is not a valid object name: %s", name, strings.Join(msgs, "; "))
	}

	if len(e.MACs) == 0 {
		return nil, errors.New("no MACs")
	}
	macs := make([]string, 0, len(e.MACs))
	for _, s := range e.MACs {
		mac := strings.ToLower(s)
		if !validMAC(mac) {
			return nil, fmt.Errorf("MAC %q is not six colon-separated hex bytes", s)
		}
		if other, ok := seenMAC[mac]; ok {
			if other == e.Name {
				return nil, fmt.Errorf("MAC %s is listed twice", mac)
			}
			return nil, fmt.Errorf("MAC %s is also machine %q's", mac, other)
		}
		seenMAC[mac] = e.Name
		macs = append(macs, mac)
	}
	if !validIPv4(e.IP) {
		return nil, fmt.Errorf("IP %q is not a dotted-quad IPv4 address", e.IP)
	}

	// The tag list is resolved here, with the same rule kubefarm-pxe uses, so
	// that spec.tags shows what applies to the machine, `all` included.
	r, err := machineconfig.Resolve(pool, e.Tags)
	if err != nil {
		return nil, err
	}

	return &kubefarmv1.Machine{
		TypeMeta: metav1.TypeMeta{APIVersion: kubefarmv1.GroupVersion.String(), Kind: "Machine"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: pool.Namespace,
			Labels: map[string]string{
				kubefarmv1.LabelPool:          pool.Name,
				kubefarmv1.LabelTenantCluster: pool.Spec.Cluster,
				LabelManagedBy:                ManagedBy,
			},
			OwnerReferences: []metav1.OwnerReference{*owner.DeepCopy()},
		},
		Spec: kubefarmv1.MachineSpec{
			Pool:         pool.Name,
			Cluster:      pool.Spec.Cluster,
			Hostname:     e.Name,
			MACs:         macs,
			IP:           e.IP,
			Tags:         r.Tags,
			DesiredImage: pool.Spec.BootImage,
			Power:        e.Power.DeepCopy(),
		},
	}, nil
}

// validMAC reports whether s is lowercase xx:xx:xx:xx:xx:xx, the only form
// the API admits and the form kubefarm-pxe's index keys on.
func validMAC(s string) bool {
	if len(s) != 17 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if i%3 == 2 {
			if c != ':' {
				return false
			}
			continue
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// validIPv4 accepts a dotted quad, without the leading zeros that some
// parsers read as octal.
func validIPv4(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is4()
}

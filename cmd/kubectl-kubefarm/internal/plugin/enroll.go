package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// `kubectl kubefarm enroll`: a DiscoveredMachine becomes an entry of a
// NodePool's spec.machines. What the entry is, whether it may be added, and
// how (a patch, or lines for a values file) is decided here; package cli
// reads the objects and sends the patch.

// Keys by which GitOps tools mark the objects they own.
const (
	labelManagedBy        = "app.kubernetes.io/managed-by"
	labelInstance         = "app.kubernetes.io/instance"
	annotationHelmRelease = "meta.helm.sh/release-name"
	annotationHelmNS      = "meta.helm.sh/release-namespace"
	annotationArgoTrack   = "argocd.argoproj.io/tracking-id"
)

// EnrollRequest is what enroll decides on: the pool, the discovered
// machine, the AddressClaims of its MAC and of the address it is to get
// (those that exist), and the operator's arguments.
type EnrollRequest struct {
	Pool       *v1alpha1.NodePool
	Discovered *v1alpha1.DiscoveredMachine
	Claims     []v1alpha1.AddressClaim
	// Name of the new entry (the node's hostname).
	Name string
	// IP of the new entry; empty takes the discovered machine's current
	// address when it is inside the pool's subnet.
	IP string
	// Power is the --power-* flags (EnrollPower).
	Power PowerFlags
}

var labelRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// EnrollEntry is the pool entry of the discovered machine, or an error
// naming why it cannot be one: the name or address is not valid for the
// pool, or the pool or another holder already uses the name, MAC or IP.
// The NodePool webhook and the AddressClaims would refuse the same later;
// refusing here says it before anything is written, in the operator's
// terms.
func EnrollEntry(r EnrollRequest) (v1alpha1.MachineEntry, error) {
	p, dm := r.Pool, r.Discovered
	if p == nil || dm == nil {
		return v1alpha1.MachineEntry{}, errors.New("a pool and a discovered machine are required")
	}
	pool := p.Namespace + "/" + p.Name
	if msgs := validation.IsDNS1123Label(r.Name); len(msgs) > 0 || !labelRE.MatchString(r.Name) {
		return v1alpha1.MachineEntry{}, fmt.Errorf("--name %q is not a valid hostname (lowercase letters, digits and '-', at most 63): %s", r.Name, strings.Join(msgs, "; "))
	}
	machine := p.Name + "-" + r.Name
	if msgs := validation.IsDNS1123Subdomain(machine); len(msgs) > 0 {
		return v1alpha1.MachineEntry{}, fmt.Errorf("--name %q: the Machine would be named %q, which is not a valid object name: %s", r.Name, machine, strings.Join(msgs, "; "))
	}
	mac := strings.ToLower(dm.Spec.MAC)
	if mac == "" {
		return v1alpha1.MachineEntry{}, fmt.Errorf("DiscoveredMachine %s has no spec.mac", dm.Name)
	}
	subnet, err := netip.ParsePrefix(p.Spec.Network.Subnet)
	if err != nil {
		return v1alpha1.MachineEntry{}, fmt.Errorf("NodePool %s: spec.network.subnet %q: %w", pool, p.Spec.Network.Subnet, err)
	}
	ip := r.IP
	if ip == "" {
		a, err := netip.ParseAddr(dm.Spec.IP)
		if dm.Spec.IP == "" || err != nil || !subnet.Contains(a) {
			return v1alpha1.MachineEntry{}, fmt.Errorf("DiscoveredMachine %s's address %q is not inside NodePool %s's subnet %s: give the machine's address with --ip",
				dm.Name, dm.Spec.IP, pool, subnet)
		}
		ip = a.String()
	} else {
		a, err := netip.ParseAddr(ip)
		if err != nil || !a.Is4() || a.String() != ip {
			return v1alpha1.MachineEntry{}, fmt.Errorf("--ip %q is not a dotted-quad IPv4 address", ip)
		}
		if !subnet.Contains(a) {
			return v1alpha1.MachineEntry{}, fmt.Errorf("--ip %s is not inside NodePool %s's subnet %s", ip, pool, subnet)
		}
	}
	if len(p.Spec.Machines) >= v1alpha1.MaxMachinesPerPool {
		return v1alpha1.MachineEntry{}, fmt.Errorf("NodePool %s has %d machines, the most a pool holds: enroll into another pool", pool, len(p.Spec.Machines))
	}
	for _, e := range p.Spec.Machines {
		switch {
		case e.Name == r.Name:
			return v1alpha1.MachineEntry{}, fmt.Errorf("NodePool %s already has a machine named %s (MACs %s, IP %s): choose another --name",
				pool, e.Name, strings.Join(e.MACs, ","), e.IP)
		case containsFold(e.MACs, mac):
			return v1alpha1.MachineEntry{}, fmt.Errorf("MAC %s is already machine %s's in NodePool %s: it is enrolled", mac, e.Name, pool)
		case e.IP == ip:
			return v1alpha1.MachineEntry{}, fmt.Errorf("IP %s is already machine %s's in NodePool %s: give another with --ip", ip, e.Name, pool)
		}
	}
	if err := claimConflict(p, machine, mac, ip, r.Claims); err != nil {
		return v1alpha1.MachineEntry{}, err
	}
	power, err := EnrollPower(r.Power, dm)
	if err != nil {
		return v1alpha1.MachineEntry{}, err
	}
	return v1alpha1.MachineEntry{Name: r.Name, MACs: []string{mac}, IP: ip, Power: power}, nil
}

// claimConflict: the MAC or IP in use by a Machine of another pool, or by
// a catch-all Machine. The catch-all Machine of this very MAC in this
// pool is not in the way: the pool retires it for the entry.
func claimConflict(p *v1alpha1.NodePool, machine, mac, ip string, claims []v1alpha1.AddressClaim) error {
	mine := v1alpha1.AddressHolder{Namespace: p.Namespace, Pool: p.Name, Machine: machine}
	catchAll := v1alpha1.AddressHolder{Namespace: p.Namespace, Pool: p.Name, Machine: p.Name + "-" + strings.ReplaceAll(mac, ":", "-")}
	for _, c := range claims {
		if c.Spec.Holder == mine {
			continue
		}
		switch {
		case c.Spec.Kind == v1alpha1.AddressMAC && c.Spec.Address == mac && c.Spec.Holder != catchAll:
			return fmt.Errorf("MAC %s is held by %s (AddressClaim %s): it is enrolled there", mac, c.Spec.Holder, c.Name)
		case c.Spec.Kind == v1alpha1.AddressIPv4 && c.Spec.Address == ip && c.Spec.Holder != catchAll:
			return fmt.Errorf("IP %s is held by %s (AddressClaim %s): give another with --ip", ip, c.Spec.Holder, c.Name)
		}
	}
	return nil
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// PoolOwner names the tool that owns the pool's manifest, "" when none is
// recognised: a pool a Helm release made (the label managed-by: Helm, as
// charts/kubefarm sets it), or one Argo CD tracks (its tracking-id
// annotation, or its older label tracking on app.kubernetes.io/instance).
// An edit of such a pool in the cluster lasts until the tool's next
// upgrade or sync, which puts spec.machines back as its source says, and
// so removes the machine again: the source must change instead.
func PoolOwner(p *v1alpha1.NodePool) string {
	switch {
	case p.Labels[labelManagedBy] == "Helm":
		rel, ns := p.Annotations[annotationHelmRelease], p.Annotations[annotationHelmNS]
		switch {
		case rel == "":
			return "Helm (label " + labelManagedBy + "=Helm)"
		case ns == "":
			return "Helm release " + rel
		}
		return "Helm release " + rel + " in namespace " + ns
	case p.Annotations[annotationArgoTrack] != "":
		return "Argo CD (annotation " + annotationArgoTrack + "=" + p.Annotations[annotationArgoTrack] + ")"
	case p.Labels[labelInstance] != "":
		return "Argo CD or another tool (label " + labelInstance + "=" + p.Labels[labelInstance] + ")"
	}
	return ""
}

// ValuesSnippet is what to add to the values file of charts/kubefarm (the
// kubefarm values shape) for entry: comments saying where, then the lines of
// the node under the pool's `nodes:`. The MAC is quoted: unquoted, YAML 1.1
// reads some MACs as base-60 numbers. The node's power is the entry's
// spec.power field for field (charts/kubefarm copies a node's power into
// its pool entry as it is); its strings are quoted for the same reason, and
// because a Secret named 1e3 would otherwise be a number.
func ValuesSnippet(p *v1alpha1.NodePool, owner string, entry v1alpha1.MachineEntry) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# NodePool %s/%s is managed by %s: kubectl kubefarm did not change it.\n", p.Namespace, p.Name, owner)
	where := "the nodePools entry that renders NodePool " + p.Name
	if suffix, ok := strings.CutPrefix(p.Name, p.Spec.Cluster+"-"); ok && suffix != "" {
		where = fmt.Sprintf("the nodePools entry with name: %s (charts/kubefarm names it <clusterName>-<name>; an entry without a name is pool<index>)", suffix)
	}
	fmt.Fprintf(&b, "# Add these lines under nodes: of %s,\n# then upgrade the release or sync the application:\n", where)
	fmt.Fprintf(&b, "- name: %s\n  mac: %q\n  ip: %s\n", entry.Name, strings.Join(entry.MACs, ","), entry.IP)
	if pw := entry.Power; pw != nil {
		fmt.Fprintf(&b, "  power:\n    driver: %s\n    address: %q\n    credentialsSecret: %q\n", pw.Driver, pw.Address, pw.CredentialsSecret)
		if pw.CASecret != "" {
			fmt.Fprintf(&b, "    caSecret: %q\n", pw.CASecret)
		}
		if pw.InsecureSkipVerify {
			b.WriteString("    insecureSkipVerify: true\n")
		}
	}
	return b.String()
}

// EnrollPatch is the JSON patch that appends entry to the pool's
// spec.machines, valid only while the pool is at the resourceVersion it
// was read at: the patch sets metadata.resourceVersion to that version,
// which the API server takes as the update's precondition, so an edit made
// since the pool was read (another enroll, a GitOps sync) makes it answer
// Conflict instead of the entry being checked against a pool that is gone;
// the caller reads the pool again and decides again. (A JSON patch "test"
// of the version would refuse too, but with a bare 422 that names nothing.)
//
// Why not server-side apply: spec.machines is a map-list keyed by name, so
// an apply of one entry under the field manager kubectl-kubefarm would own
// that entry, and the next enroll's apply, naming only its own entry,
// would remove the first one (a manager's apply drops what it owned and no
// longer names). A patch records the entry under kubectl-kubefarm without
// that trap.
func EnrollPatch(p *v1alpha1.NodePool, entry v1alpha1.MachineEntry) []byte {
	ops := []map[string]any{{"op": "replace", "path": "/metadata/resourceVersion", "value": p.ResourceVersion}}
	if len(p.Spec.Machines) == 0 {
		ops = append(ops, map[string]any{"op": "add", "path": "/spec/machines", "value": []v1alpha1.MachineEntry{entry}})
	} else {
		ops = append(ops, map[string]any{"op": "add", "path": "/spec/machines/-", "value": entry})
	}
	b, _ := json.Marshal(ops)
	return b
}

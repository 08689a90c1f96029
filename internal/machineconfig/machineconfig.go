// Package machineconfig resolves what a NodePool's tags mean for one machine:
// the tag list itself (with the pool-wide `all` tag), and the node labels,
// taints, kernel arguments and DHCP options that list adds up to.
//
// It exists so that there is one answer. The NodePool controller writes a
// Machine's tags, kubefarm-pxe's DHCP server turns them into options, its
// HTTP boot turns them into kernel arguments and into the labels and taints
// the agent registers the node with; if each of those merged tags its own
// way, a machine could boot with one tag set's kernel and join with another's
// labels. Everything here is pure and takes the pool as the API delivered it,
// so it can be shared by the controller and by kubefarm-pxe alike.
package machineconfig

import (
	"cmp"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// AllTag is the tag that, when a pool defines it, applies to every machine of
// the pool before the machine's own tags. It is kubefarm's chart convention:
// a values file puts what every node needs under tags.all instead of
// repeating it on each machine.
const AllTag = "all"

// Tags is the ordered tag list of a machine whose entry (or Machine object)
// names entryTags: `all` first when the pool defines it, then entryTags in
// their order, each tag once at its first position. Order matters because a
// later tag wins over an earlier one, so it is never sorted.
//
// Tags does not check that the tags exist; Resolve does.
func Tags(pool *kubefarmv1.NodePool, entryTags []string) []string {
	var out []string
	if pool != nil {
		if _, ok := pool.Spec.Tags[AllTag]; ok {
			out = append(out, AllTag)
		}
	}
	for _, t := range entryTags {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// MachineName is the name of the Machine for entry of pool. It can collide
// across pools of one namespace ("a-b" + "c" and "a" + "b-c"), which a
// builder of one pool cannot see: the NodePool controller must not take over
// a Machine another pool controls.
func MachineName(pool, entry string) string { return pool + "-" + entry }

// Entry is the pool's entry for the Machine called machine, nil when the
// pool lists none by that name (a discovered or catch-all machine).
func Entry(pool *kubefarmv1.NodePool, machine string) *kubefarmv1.MachineEntry {
	for i := range pool.Spec.Machines {
		if MachineName(pool.Name, pool.Spec.Machines[i].Name) == machine {
			return &pool.Spec.Machines[i]
		}
	}
	return nil
}

// Resolved is one machine's share of its pool's settings. Nothing in it
// aliases the pool, so callers may keep or change it while the pool object
// stays in an informer cache.
type Resolved struct {
	// Tags is the effective tag list (see Tags).
	Tags []string
	// Labels: the pool's, then each tag's in order; a later value wins.
	// Nil when there are none.
	Labels map[string]string
	// Taints: the pool's, then each tag's in order. A later taint with the
	// same key and effect replaces an earlier one in the earlier one's place,
	// because the node can carry only one taint per key and effect.
	Taints []corev1.Taint
	// KernelArgs: the pool's, then each tag's in order. Not deduplicated:
	// repeating an argument (console=) is meaningful on a kernel command line.
	KernelArgs []string
	// DHCPOptions: each tag's in order, a later tag's option replacing an
	// earlier one with the same code; sorted by code so that replies are
	// byte-identical whatever the map iteration order. Values are as in the
	// API (text or 0x-hex); turning them into wire bytes and refusing codes
	// the server owns is the DHCP server's business.
	DHCPOptions []kubefarmv1.DHCPOption
}

// Resolve computes machine's settings from its pool. machineTags is the
// entry's tag list or the Machine's spec.tags; `all` is applied either way,
// so a Machine written before the pool defined `all` resolves like a new one.
// A tag the pool does not define is an error naming it: serving a machine
// without a tag it asked for (a taint, say) would be worse than not serving it.
func Resolve(pool *kubefarmv1.NodePool, machineTags []string) (Resolved, error) {
	if pool == nil {
		return Resolved{}, fmt.Errorf("a pool is required")
	}
	tags := Tags(pool, machineTags)
	specs := make([]*kubefarmv1.TagSpec, len(tags))
	for i, name := range tags {
		t, ok := pool.Spec.Tags[name]
		if !ok {
			return Resolved{}, fmt.Errorf("tag %q is not defined in pool %s/%s", name, pool.Namespace, pool.Name)
		}
		specs[i] = &t
	}

	out := Resolved{Tags: tags}
	addLabels := func(m map[string]string) {
		if len(m) == 0 {
			return
		}
		if out.Labels == nil {
			out.Labels = make(map[string]string, len(m))
		}
		for k, v := range m {
			out.Labels[k] = v
		}
	}
	type taintKey struct {
		key    string
		effect corev1.TaintEffect
	}
	at := map[taintKey]int{}
	addTaints := func(ts []corev1.Taint) {
		for i := range ts {
			t := *ts[i].DeepCopy()
			k := taintKey{t.Key, t.Effect}
			if j, ok := at[k]; ok {
				out.Taints[j] = t
				continue
			}
			at[k] = len(out.Taints)
			out.Taints = append(out.Taints, t)
		}
	}
	byCode := map[int32]string{}

	addLabels(pool.Spec.Labels)
	addTaints(pool.Spec.Taints)
	out.KernelArgs = append(out.KernelArgs, pool.Spec.KernelArgs...)
	for _, t := range specs {
		addLabels(t.Labels)
		addTaints(t.Taints)
		out.KernelArgs = append(out.KernelArgs, t.KernelArgs...)
		for _, o := range t.DHCPOptions {
			byCode[o.Code] = o.Value
		}
	}
	if len(byCode) > 0 {
		out.DHCPOptions = make([]kubefarmv1.DHCPOption, 0, len(byCode))
		for c, v := range byCode {
			out.DHCPOptions = append(out.DHCPOptions, kubefarmv1.DHCPOption{Code: c, Value: v})
		}
		slices.SortFunc(out.DHCPOptions, func(a, b kubefarmv1.DHCPOption) int { return cmp.Compare(a.Code, b.Code) })
	}
	return out, nil
}

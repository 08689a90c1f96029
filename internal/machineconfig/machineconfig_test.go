package machineconfig

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func taint(key, value string, effect corev1.TaintEffect) corev1.Taint {
	return corev1.Taint{Key: key, Value: value, Effect: effect}
}

func pool(tags map[string]kubefarmv1.TagSpec) *kubefarmv1.NodePool {
	return &kubefarmv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "workers"},
		Spec: kubefarmv1.NodePoolSpec{
			Cluster:    "c1",
			BootImage:  "img",
			Labels:     map[string]string{"pool": "workers", "role": "worker"},
			Taints:     []corev1.Taint{taint("dedicated", "pool", corev1.TaintEffectNoSchedule)},
			KernelArgs: []string{"console=ttyS0", "quiet"},
			Tags:       tags,
		},
	}
}

func TestTags(t *testing.T) {
	withAll := pool(map[string]kubefarmv1.TagSpec{"all": {}, "gpu": {}, "debug": {}})
	withoutAll := pool(map[string]kubefarmv1.TagSpec{"gpu": {}, "debug": {}})
	for _, tc := range []struct {
		name  string
		pool  *kubefarmv1.NodePool
		entry []string
		want  []string
	}{
		{"no tags, no all", withoutAll, nil, nil},
		{"no tags, all defined", withAll, nil, []string{"all"}},
		{"entry order kept, not sorted", withoutAll, []string{"gpu", "debug"}, []string{"gpu", "debug"}},
		{"all first", withAll, []string{"gpu", "debug"}, []string{"all", "gpu", "debug"}},
		{"all named by the entry moves to the front", withAll, []string{"gpu", "all"}, []string{"all", "gpu"}},
		{"duplicates keep the first position", withoutAll, []string{"debug", "gpu", "debug"}, []string{"debug", "gpu"}},
		{"all named but not defined is kept for Resolve to refuse", withoutAll, []string{"all"}, []string{"all"}},
		{"nil pool", nil, []string{"gpu"}, []string{"gpu"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Tags(tc.pool, tc.entry); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Tags = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	tags := map[string]kubefarmv1.TagSpec{
		"all": {
			Labels:      map[string]string{"farm": "yes", "role": "all"},
			Taints:      []corev1.Taint{taint("dedicated", "all", corev1.TaintEffectNoSchedule)},
			KernelArgs:  []string{"mitigations=auto"},
			DHCPOptions: []kubefarmv1.DHCPOption{{Code: 42, Value: "10.0.0.1"}, {Code: 150, Value: "0x0a000002"}},
		},
		"gpu": {
			Labels:      map[string]string{"example.com/gpu": "true", "role": "gpu"},
			Taints:      []corev1.Taint{taint("example.com/gpu", "", corev1.TaintEffectNoSchedule), taint("dedicated", "gpu", corev1.TaintEffectNoExecute)},
			KernelArgs:  []string{"nvidia.modeset=1", "console=tty0"},
			DHCPOptions: []kubefarmv1.DHCPOption{{Code: 150, Value: "gpu-tftp"}},
		},
		"debug": {
			Labels:      map[string]string{"role": "debug"},
			Taints:      []corev1.Taint{taint("dedicated", "debug", corev1.TaintEffectNoSchedule)},
			KernelArgs:  []string{"systemd.log_level=debug", "quiet"},
			DHCPOptions: []kubefarmv1.DHCPOption{{Code: 42, Value: "10.0.0.9"}, {Code: 7, Value: "log"}},
		},
	}
	withoutAll := map[string]kubefarmv1.TagSpec{"gpu": tags["gpu"], "debug": tags["debug"]}

	for _, tc := range []struct {
		name    string
		pool    *kubefarmv1.NodePool
		machine []string
		want    Resolved
		wantErr string
	}{
		{
			name: "pool only",
			pool: pool(withoutAll),
			want: Resolved{
				Labels:     map[string]string{"pool": "workers", "role": "worker"},
				Taints:     []corev1.Taint{taint("dedicated", "pool", corev1.TaintEffectNoSchedule)},
				KernelArgs: []string{"console=ttyS0", "quiet"},
			},
		},
		{
			name: "empty pool gives nils",
			pool: &kubefarmv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "p"}},
			want: Resolved{},
		},
		{
			name:    "all applies to a machine without tags",
			pool:    pool(tags),
			machine: nil,
			want: Resolved{
				Tags:        []string{"all"},
				Labels:      map[string]string{"pool": "workers", "role": "all", "farm": "yes"},
				Taints:      []corev1.Taint{taint("dedicated", "all", corev1.TaintEffectNoSchedule)},
				KernelArgs:  []string{"console=ttyS0", "quiet", "mitigations=auto"},
				DHCPOptions: []kubefarmv1.DHCPOption{{Code: 42, Value: "10.0.0.1"}, {Code: 150, Value: "0x0a000002"}},
			},
		},
		{
			name:    "all first, then the machine's tags in order: later wins",
			pool:    pool(tags),
			machine: []string{"gpu", "debug"},
			want: Resolved{
				Tags:   []string{"all", "gpu", "debug"},
				Labels: map[string]string{"pool": "workers", "role": "debug", "farm": "yes", "example.com/gpu": "true"},
				Taints: []corev1.Taint{
					// Replaced in place by debug's; gpu's NoExecute has another effect.
					taint("dedicated", "debug", corev1.TaintEffectNoSchedule),
					taint("example.com/gpu", "", corev1.TaintEffectNoSchedule),
					taint("dedicated", "gpu", corev1.TaintEffectNoExecute),
				},
				KernelArgs: []string{"console=ttyS0", "quiet", "mitigations=auto", "nvidia.modeset=1", "console=tty0", "systemd.log_level=debug", "quiet"},
				DHCPOptions: []kubefarmv1.DHCPOption{
					{Code: 7, Value: "log"}, {Code: 42, Value: "10.0.0.9"}, {Code: 150, Value: "gpu-tftp"},
				},
			},
		},
		{
			name:    "tag order decides: debug before gpu",
			pool:    pool(withoutAll),
			machine: []string{"debug", "gpu"},
			want: Resolved{
				Tags:   []string{"debug", "gpu"},
				Labels: map[string]string{"pool": "workers", "role": "gpu", "example.com/gpu": "true"},
				Taints: []corev1.Taint{
					taint("dedicated", "debug", corev1.TaintEffectNoSchedule),
					taint("example.com/gpu", "", corev1.TaintEffectNoSchedule),
					taint("dedicated", "gpu", corev1.TaintEffectNoExecute),
				},
				KernelArgs: []string{"console=ttyS0", "quiet", "systemd.log_level=debug", "quiet", "nvidia.modeset=1", "console=tty0"},
				DHCPOptions: []kubefarmv1.DHCPOption{
					{Code: 7, Value: "log"}, {Code: 42, Value: "10.0.0.9"}, {Code: 150, Value: "gpu-tftp"},
				},
			},
		},
		{
			name:    "a Machine that already lists all resolves like one that does not",
			pool:    pool(tags),
			machine: []string{"all", "gpu", "all"},
			want: Resolved{
				Tags:   []string{"all", "gpu"},
				Labels: map[string]string{"pool": "workers", "role": "gpu", "farm": "yes", "example.com/gpu": "true"},
				Taints: []corev1.Taint{
					taint("dedicated", "all", corev1.TaintEffectNoSchedule),
					taint("example.com/gpu", "", corev1.TaintEffectNoSchedule),
					taint("dedicated", "gpu", corev1.TaintEffectNoExecute),
				},
				KernelArgs:  []string{"console=ttyS0", "quiet", "mitigations=auto", "nvidia.modeset=1", "console=tty0"},
				DHCPOptions: []kubefarmv1.DHCPOption{{Code: 42, Value: "10.0.0.1"}, {Code: 150, Value: "gpu-tftp"}},
			},
		},
		{
			name:    "undefined tag is named",
			pool:    pool(withoutAll),
			machine: []string{"gpu", "fpga"},
			wantErr: `tag "fpga" is not defined in pool ns/workers`,
		},
		{
			name:    "all named by a machine of a pool without it",
			pool:    pool(withoutAll),
			machine: []string{"all"},
			wantErr: `tag "all" is not defined`,
		},
		{
			name:    "no pool",
			wantErr: "pool is required",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(tc.pool, tc.machine)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Resolve =\n%#v\nwant\n%#v", got, tc.want)
			}
		})
	}
}

// TestResolveDoesNotAlias guards informer caches: kubefarm-pxe resolves
// straight from cached pools, and a caller appending to or editing the
// result must not reach back into them.
func TestResolveDoesNotAlias(t *testing.T) {
	added := metav1.Now()
	p := pool(map[string]kubefarmv1.TagSpec{"all": {
		Labels:     map[string]string{"a": "1"},
		Taints:     []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule, TimeAdded: &added}},
		KernelArgs: []string{"x=1"},
	}})
	before := p.DeepCopy()
	r, err := Resolve(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Labels["pool"] = "changed"
	r.Taints[0].Value = "changed"
	r.Taints[1].TimeAdded.Time = r.Taints[1].TimeAdded.AddDate(1, 0, 0)
	r.KernelArgs[0] = "changed"
	_ = append(r.KernelArgs[:1], "overwrite")
	r.Tags[0] = "changed"
	if !reflect.DeepEqual(p, before) {
		t.Fatalf("the pool changed through the result:\n%#v\nwas\n%#v", p.Spec, before.Spec)
	}
}

// TestResolveDeterministic runs the resolution many times: map iteration
// order differs between runs, the result must not.
func TestResolveDeterministic(t *testing.T) {
	tags := map[string]kubefarmv1.TagSpec{}
	var names []string
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		tags[n] = kubefarmv1.TagSpec{
			Labels:      map[string]string{"l": n, "l-" + n: n},
			DHCPOptions: []kubefarmv1.DHCPOption{{Code: 200, Value: n}, {Code: int32(100 + len(names)), Value: n}},
		}
		names = append(names, n)
	}
	first, err := Resolve(pool(tags), names)
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		again, err := Resolve(pool(tags), names)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(again, first) {
			t.Fatalf("second resolution differs:\n%#v\n%#v", again, first)
		}
	}
	if last := first.DHCPOptions[len(first.DHCPOptions)-1]; last.Code != 200 || last.Value != "h" {
		t.Fatalf("option 200 = %+v, want the last tag's", last)
	}
}

package desired

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func testPool() *kubefarmv1.NodePool {
	return &kubefarmv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "workers", UID: "6f1c0e4e-0000-4000-8000-000000000001"},
		Spec: kubefarmv1.NodePoolSpec{
			Cluster:   "c1",
			BootImage: "node-2026-01",
			Network:   kubefarmv1.BootNetwork{Subnet: "10.28.0.0/16"},
			Tags: map[string]kubefarmv1.TagSpec{
				"debug": {KernelArgs: []string{"systemd.log_level=debug"}},
				"gpu":   {Labels: map[string]string{"example.com/gpu": "true"}},
			},
			Machines: []kubefarmv1.MachineEntry{
				{Name: "m1", MACs: []string{"02:00:0a:1c:00:0b"}, IP: "10.28.0.11"},
				{Name: "m2", MACs: []string{"02:00:0A:1C:00:0C", "02:00:0a:1c:01:0c"}, IP: "10.28.0.12", Tags: []string{"gpu"}},
				{Name: "m3", MACs: []string{"02:00:0a:1c:00:0d"}, IP: "10.28.0.13", Tags: []string{"debug", "gpu", "debug"}},
			},
		},
	}
}

func TestMachineJSON(t *testing.T) {
	ms, err := Machines(testPool())
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(ms[1])
	if err != nil {
		t.Fatal(err)
	}
	want := `{"kind":"Machine","apiVersion":"kubefarm.io/v1alpha1",` +
		`"metadata":{"name":"workers-m2","namespace":"tenants",` +
		`"labels":{"app.kubernetes.io/managed-by":"kubefarm","kubefarm.io/pool":"workers","kubefarm.io/tenant-cluster":"c1"},` +
		`"ownerReferences":[{"apiVersion":"kubefarm.io/v1alpha1","kind":"NodePool","name":"workers","uid":"6f1c0e4e-0000-4000-8000-000000000001","controller":true,"blockOwnerDeletion":true}]},` +
		`"spec":{"pool":"workers","cluster":"c1","hostname":"m2","macs":["02:00:0a:1c:00:0c","02:00:0a:1c:01:0c"],"ip":"10.28.0.12","tags":["gpu"],"desiredImage":"node-2026-01"},` +
		`"status":{}}`
	if string(got) != want {
		t.Fatalf("Machine JSON\n got %s\nwant %s", got, want)
	}
}

func TestMachines(t *testing.T) {
	withAll := func(p *kubefarmv1.NodePool) *kubefarmv1.NodePool {
		p.Spec.Tags["all"] = kubefarmv1.TagSpec{KernelArgs: []string{"console=ttyS0"}}
		return p
	}
	type want struct {
		name string
		tags []string
		macs []string
	}
	for _, tc := range []struct {
		name string
		pool *kubefarmv1.NodePool
		want []want
	}{
		{
			name: "entries in order, tags deduplicated in first position, MACs lowercased in order",
			pool: testPool(),
			want: []want{
				{"workers-m1", nil, []string{"02:00:0a:1c:00:0b"}},
				{"workers-m2", []string{"gpu"}, []string{"02:00:0a:1c:00:0c", "02:00:0a:1c:01:0c"}},
				{"workers-m3", []string{"debug", "gpu"}, []string{"02:00:0a:1c:00:0d"}},
			},
		},
		{
			name: "all tag first on every machine",
			pool: withAll(testPool()),
			want: []want{
				{"workers-m1", []string{"all"}, []string{"02:00:0a:1c:00:0b"}},
				{"workers-m2", []string{"all", "gpu"}, []string{"02:00:0a:1c:00:0c", "02:00:0a:1c:01:0c"}},
				{"workers-m3", []string{"all", "debug", "gpu"}, []string{"02:00:0a:1c:00:0d"}},
			},
		},
		{
			name: "all named by an entry after its own tags still comes first",
			pool: func() *kubefarmv1.NodePool {
				p := withAll(testPool())
				p.Spec.Machines = p.Spec.Machines[2:]
				p.Spec.Machines[0].Tags = []string{"gpu", "all"}
				return p
			}(),
			want: []want{{"workers-m3", []string{"all", "gpu"}, []string{"02:00:0a:1c:00:0d"}}},
		},
		{
			name: "no machines",
			pool: func() *kubefarmv1.NodePool { p := testPool(); p.Spec.Machines = nil; return p }(),
			want: []want{},
		},
		{
			name: "pool name with dots, longest Machine name that fits",
			pool: func() *kubefarmv1.NodePool {
				p := testPool()
				p.Name = "rack-1.dc-2"
				p.Spec.Machines = p.Spec.Machines[:1]
				p.Spec.Machines[0].Name = strings.Repeat("n", 63)
				return p
			}(),
			want: []want{{"rack-1.dc-2-" + strings.Repeat("n", 63), nil, []string{"02:00:0a:1c:00:0b"}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.pool.DeepCopy()
			ms, err := Machines(tc.pool)
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) != len(tc.want) {
				t.Fatalf("%d Machines, want %d", len(ms), len(tc.want))
			}
			for i, m := range ms {
				w := tc.want[i]
				e := tc.pool.Spec.Machines[i]
				if m.Name != w.name || m.Namespace != tc.pool.Namespace {
					t.Errorf("Machine %d is %s/%s, want %s/%s", i, m.Namespace, m.Name, tc.pool.Namespace, w.name)
				}
				if !reflect.DeepEqual(m.Spec.Tags, w.tags) {
					t.Errorf("%s: tags %q, want %q", m.Name, m.Spec.Tags, w.tags)
				}
				if !reflect.DeepEqual(m.Spec.MACs, w.macs) {
					t.Errorf("%s: MACs %q, want %q", m.Name, m.Spec.MACs, w.macs)
				}
				wantSpec := kubefarmv1.MachineSpec{
					Pool: tc.pool.Name, Cluster: "c1", Hostname: e.Name, MACs: w.macs, IP: e.IP,
					Tags: w.tags, DesiredImage: "node-2026-01",
				}
				if !reflect.DeepEqual(m.Spec, wantSpec) {
					t.Errorf("%s: spec %+v, want %+v", m.Name, m.Spec, wantSpec)
				}
				if m.Labels[kubefarmv1.LabelPool] != tc.pool.Name || m.Labels[kubefarmv1.LabelTenantCluster] != "c1" || m.Labels[LabelManagedBy] != ManagedBy || len(m.Labels) != 3 {
					t.Errorf("%s: labels %v", m.Name, m.Labels)
				}
				if c := metav1.GetControllerOf(m); c == nil || c.UID != tc.pool.UID || c.Kind != "NodePool" || c.Name != tc.pool.Name ||
					c.BlockOwnerDeletion == nil || !*c.BlockOwnerDeletion || len(m.OwnerReferences) != 1 {
					t.Errorf("%s: owner references %+v", m.Name, m.OwnerReferences)
				}
				if !reflect.DeepEqual(m.Status, kubefarmv1.MachineStatus{}) {
					t.Errorf("%s: status %+v, want none", m.Name, m.Status)
				}
			}
			// The result is the caller's to change; the pool (an informer
			// cache's object, in the controller) must not move with it.
			for _, m := range ms {
				if len(m.Spec.MACs) > 0 {
					m.Spec.MACs[0] = "changed"
				}
				if len(m.Spec.Tags) > 0 {
					m.Spec.Tags[0] = "changed"
				}
				*m.OwnerReferences[0].Controller = false
			}
			if !reflect.DeepEqual(tc.pool, before) {
				t.Fatalf("Machines changed the pool")
			}
		})
	}
}

func TestMachinesRejected(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(p *kubefarmv1.NodePool)
		want   []string // every fragment must be in the error
	}{
		{"no UID", func(p *kubefarmv1.NodePool) { p.UID = "" }, []string{"tenants/workers", "UID"}},
		{"no namespace", func(p *kubefarmv1.NodePool) { p.Namespace = "" }, []string{"namespace"}},
		{"entry name not a hostname", func(p *kubefarmv1.NodePool) { p.Spec.Machines[1].Name = "M_2" }, []string{`machine "M_2"`, "not a valid hostname"}},
		{"entry name ends in a dash", func(p *kubefarmv1.NodePool) { p.Spec.Machines[1].Name = "m2-" }, []string{`machine "m2-"`}},
		{"entry name used twice", func(p *kubefarmv1.NodePool) { p.Spec.Machines[2].Name = "m1" }, []string{`machine "m1": name is used by two entries`}},
		{"MAC malformed", func(p *kubefarmv1.NodePool) { p.Spec.Machines[0].MACs = []string{"02-00-0a-1c-00-0b"} }, []string{`machine "m1"`, `MAC "02-00-0a-1c-00-0b"`}},
		{"MAC twice in one entry, once upper case", func(p *kubefarmv1.NodePool) {
			p.Spec.Machines[0].MACs = []string{"02:00:0a:1c:00:0b", "02:00:0A:1C:00:0B"}
		}, []string{`machine "m1": MAC 02:00:0a:1c:00:0b is listed twice`}},
		{"MAC of two entries", func(p *kubefarmv1.NodePool) { p.Spec.Machines[2].MACs = []string{"02:00:0a:1c:01:0c"} }, []string{`machine "m3": MAC 02:00:0a:1c:01:0c is also machine "m2"'s`}},
		{"no MACs", func(p *kubefarmv1.NodePool) { p.Spec.Machines[0].MACs = nil }, []string{`machine "m1": no MACs`}},
		{"IP with a leading zero", func(p *kubefarmv1.NodePool) { p.Spec.Machines[0].IP = "10.28.0.011" }, []string{`IP "10.28.0.011"`}},
		{"IPv6", func(p *kubefarmv1.NodePool) { p.Spec.Machines[0].IP = "fd00::1" }, []string{`IP "fd00::1"`}},
		{"undefined tag", func(p *kubefarmv1.NodePool) { p.Spec.Machines[2].Tags = []string{"debug", "fpga"} }, []string{`machine "m3"`, `tag "fpga" is not defined`}},
		{"pool name too long for a label", func(p *kubefarmv1.NodePool) { p.Name = strings.Repeat("p", 64) }, []string{"not a valid label value for kubefarm.io/pool"}},
		{"no boot image", func(p *kubefarmv1.NodePool) { p.Spec.BootImage = "" }, []string{"bootImage"}},
		{"every bad entry is named", func(p *kubefarmv1.NodePool) {
			p.Spec.Machines[0].IP = "x"
			p.Spec.Machines[2].Tags = []string{"fpga"}
		}, []string{`machine "m1"`, `machine "m3"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPool()
			tc.mutate(p)
			ms, err := Machines(p)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error; built %d Machines", len(ms))
			}
			if ms != nil {
				t.Errorf("Machines returned %d objects with its error", len(ms))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestMachineNameLength pins the boundary of the Machine name check: 253
// characters pass it, 254 fail it, naming the pool and the entry. Such names
// need a pool name longer than a label value, which is refused on its own
// account too (errors are joined), so the check is a backstop.
func TestMachineNameLength(t *testing.T) {
	for _, tc := range []struct {
		total int
		ok    bool
	}{{253, true}, {254, false}} {
		p := testPool()
		p.Spec.Machines = p.Spec.Machines[:1]
		entry := strings.Repeat("n", 63)
		// The pool name: DNS labels of 63 joined by dots.
		poolLen := tc.total - len(entry) - 1
		var b strings.Builder
		for b.Len() < poolLen {
			if b.Len() > 0 && b.Len()%64 == 63 {
				b.WriteByte('.')
			} else {
				b.WriteByte('p')
			}
		}
		p.Name = b.String()
		p.Spec.Machines[0].Name = entry
		_, err := Machines(p)
		if err == nil {
			t.Fatalf("total %d: a pool name of %d is not a label value; want an error", tc.total, len(p.Name))
		}
		entryErr := strings.Contains(err.Error(), `machine "`+entry+`": the Machine name`)
		if entryErr == tc.ok {
			t.Errorf("total %d: entry error %v, want %v: %v", tc.total, entryErr, !tc.ok, err)
		}
		if !strings.Contains(err.Error(), p.Namespace+"/"+p.Name) {
			t.Errorf("total %d: error does not name the pool: %v", tc.total, err)
		}
	}
}

// TestMachinesDeterministic serializes the Machines of a pool whose maps
// have many keys, many times: map order varies between runs, the bytes must
// not, or every reconcile would be a write.
func TestMachinesDeterministic(t *testing.T) {
	p := testPool()
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "all"} {
		p.Spec.Tags[n] = kubefarmv1.TagSpec{Labels: map[string]string{n: n}}
	}
	p.Spec.Machines[0].Tags = []string{"h", "g", "f", "e", "d", "c", "b", "a"}
	var first []byte
	for i := range 50 {
		ms, err := Machines(p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(ms)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = b
			if !bytes.Contains(b, []byte(`"tags":["all","h","g","f","e","d","c","b","a"]`)) {
				t.Fatalf("tag order not kept: %s", b)
			}
			continue
		}
		if !bytes.Equal(b, first) {
			t.Fatalf("run %d differs:\n%s\n%s", i, b, first)
		}
	}
}

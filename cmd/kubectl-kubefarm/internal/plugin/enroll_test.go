package plugin

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func enrollPool() *v1alpha1.NodePool {
	return &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "farm1", Name: "farm1-pool0", ResourceVersion: "42"},
		Spec: v1alpha1.NodePoolSpec{
			Cluster: "farm1",
			Network: v1alpha1.BootNetwork{Subnet: "10.28.0.0/16",
				DynamicRange: &v1alpha1.DynamicRange{Start: "10.28.72.10", End: "10.28.72.250"}},
			Machines: []v1alpha1.MachineEntry{{Name: "m1", MACs: []string{"02:00:00:00:00:01"}, IP: "10.28.0.11"}},
		},
	}
}

func discovered(mac, ip string) *v1alpha1.DiscoveredMachine {
	return &v1alpha1.DiscoveredMachine{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DiscoveredMachineName(mac)},
		Spec:       v1alpha1.DiscoveredMachineSpec{MAC: mac, IP: ip, Pool: "farm1/farm1-pool0"},
	}
}

func claim(kind v1alpha1.AddressKind, addr, ns, pool, machine string) v1alpha1.AddressClaim {
	return v1alpha1.AddressClaim{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.AddressClaimName(kind, addr)},
		Spec: v1alpha1.AddressClaimSpec{Kind: kind, Address: addr,
			Holder: v1alpha1.AddressHolder{Namespace: ns, Pool: pool, Machine: machine}},
	}
}

const enrollMAC = "52:54:00:12:34:56"

// enrollEntryCases are TestEnrollEntry's table: a request, and the entry
// or the error's words.
var enrollEntryCases = []struct {
	name    string
	req     EnrollRequest
	want    v1alpha1.MachineEntry
	wantErr []string
}{
	{
		name: "the discovered address by default",
		req:  EnrollRequest{Pool: enrollPool(), Discovered: discovered(enrollMAC, "10.28.72.14"), Name: "node7"},
		want: v1alpha1.MachineEntry{Name: "node7", MACs: []string{enrollMAC}, IP: "10.28.72.14"},
	},
	{
		name: "--ip wins",
		req:  EnrollRequest{Pool: enrollPool(), Discovered: discovered(enrollMAC, "10.28.72.14"), Name: "node7", IP: "10.28.1.7"},
		want: v1alpha1.MachineEntry{Name: "node7", MACs: []string{enrollMAC}, IP: "10.28.1.7"},
	},
	{
		name:    "discovered address outside the subnet",
		req:     EnrollRequest{Pool: enrollPool(), Discovered: discovered(enrollMAC, "10.99.0.5"), Name: "node7"},
		wantErr: []string{"10.99.0.5", "not inside", "10.28.0.0/16", "--ip"},
	},
	{
		name:    "no discovered address",
		req:     EnrollRequest{Pool: enrollPool(), Discovered: discovered(enrollMAC, ""), Name: "node7"},
		wantErr: []string{"--ip"},
	},
	{
		name:    "--ip outside the subnet",
		req:     EnrollRequest{Pool: enrollPool(), Discovered: discovered(enrollMAC, "10.28.72.14"), Name: "node7", IP: "10.29.0.1"},
		wantErr: []string{"--ip 10.29.0.1", "subnet"},
	},
	{
		name:    "--ip not a dotted quad",
		req:     EnrollRequest{Pool: enrollPool(), Discovered: discovered(enrollMAC, "10.28.72.14"), Name: "node7", IP: "10.28.0.011"},
		wantErr: []string{"--ip", "dotted-quad"},
	},
	{
		name:    "name taken",
		req:     EnrollRequest{Pool: enrollPool(), Discovered: discovered(enrollMAC, "10.28.72.14"), Name: "m1"},
		wantErr: []string{"already has a machine named m1", "--name"},
	},
	{
		name:    "MAC enrolled",
		req:     EnrollRequest{Pool: enrollPool(), Discovered: discovered("02:00:00:00:00:01", "10.28.72.14"), Name: "node7"},
		wantErr: []string{"MAC 02:00:00:00:00:01", "machine m1"},
	},
	{
		name:    "IP taken",
		req:     EnrollRequest{Pool: enrollPool(), Discovered: discovered(enrollMAC, "10.28.72.14"), Name: "node7", IP: "10.28.0.11"},
		wantErr: []string{"IP 10.28.0.11", "machine m1"},
	},
	{
		name:    "bad name",
		req:     EnrollRequest{Pool: enrollPool(), Discovered: discovered(enrollMAC, "10.28.72.14"), Name: "Node_7"},
		wantErr: []string{"--name", "Node_7"},
	},
	{
		name: "MAC held by another pool",
		req: EnrollRequest{Pool: enrollPool(), Discovered: discovered(enrollMAC, "10.28.72.14"), Name: "node7",
			Claims: []v1alpha1.AddressClaim{claim(v1alpha1.AddressMAC, enrollMAC, "farm2", "farm2-pool0", "farm2-pool0-x")}},
		wantErr: []string{"MAC " + enrollMAC, "farm2/farm2-pool0"},
	},
	{
		name: "IP held by a catch-all Machine of another MAC",
		req: EnrollRequest{Pool: enrollPool(), Discovered: discovered(enrollMAC, "10.28.72.14"), Name: "node7",
			Claims: []v1alpha1.AddressClaim{claim(v1alpha1.AddressIPv4, "10.28.72.14", "farm1", "farm1-pool0", "farm1-pool0-52-54-00-00-00-99")}},
		wantErr: []string{"IP 10.28.72.14", "farm1-pool0-52-54-00-00-00-99", "--ip"},
	},
	{
		name: "held by its own catch-all Machine: the pool retires that one",
		req: EnrollRequest{Pool: enrollPool(), Discovered: discovered(enrollMAC, "10.28.72.14"), Name: "node7",
			Claims: []v1alpha1.AddressClaim{
				claim(v1alpha1.AddressMAC, enrollMAC, "farm1", "farm1-pool0", "farm1-pool0-52-54-00-12-34-56"),
				claim(v1alpha1.AddressIPv4, "10.28.72.14", "farm1", "farm1-pool0", "farm1-pool0-52-54-00-12-34-56"),
			}},
		want: v1alpha1.MachineEntry{Name: "node7", MACs: []string{enrollMAC}, IP: "10.28.72.14"},
	},
	{
		name: "with its BMC",
		req: EnrollRequest{Pool: enrollPool(), Discovered: discovered(enrollMAC, "10.28.72.14"), Name: "node7",
			Power: PowerFlags{Driver: "ipmi", Address: "10.20.0.21", Credentials: "bmc-rack1"}},
		want: v1alpha1.MachineEntry{Name: "node7", MACs: []string{enrollMAC}, IP: "10.28.72.14",
			Power: &v1alpha1.PowerSpec{Driver: v1alpha1.PowerIPMI, Address: "10.20.0.21", CredentialsSecret: "bmc-rack1"}},
	},
	{
		name: "a power flag refused",
		req: EnrollRequest{Pool: enrollPool(), Discovered: discovered(enrollMAC, "10.28.72.14"), Name: "node7",
			Power: PowerFlags{Address: "10.20.0.21"}},
		wantErr: []string{"--power-address needs --power-driver"},
	},
}

func TestEnrollEntry(t *testing.T) {
	for _, tc := range enrollEntryCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EnrollEntry(tc.req)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("entry %+v, want an error saying %q", got, tc.wantErr)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("entry %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestPoolOwner(t *testing.T) {
	for _, tc := range []struct {
		name        string
		labels, ann map[string]string
		want        string
	}{
		{"none", nil, nil, ""},
		{"helm", map[string]string{"app.kubernetes.io/managed-by": "Helm"},
			map[string]string{"meta.helm.sh/release-name": "farm1", "meta.helm.sh/release-namespace": "farm1"}, "Helm release farm1 in namespace farm1"},
		{"helm label only", map[string]string{"app.kubernetes.io/managed-by": "Helm"}, nil, "Helm (label"},
		{"argo annotation", nil, map[string]string{"argocd.argoproj.io/tracking-id": "farms:kubefarm.io/NodePool:farm1/farm1-pool0"}, "Argo CD (annotation"},
		{"instance label", map[string]string{"app.kubernetes.io/instance": "farms"}, nil, "app.kubernetes.io/instance=farms"},
		{"another manager", map[string]string{"app.kubernetes.io/managed-by": "kubefarm"}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := enrollPool()
			p.Labels, p.Annotations = tc.labels, tc.ann
			got := PoolOwner(p)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("PoolOwner = %q, want %q", got, tc.want)
			}
		})
	}
}

// snippetNode is a node of charts/kubefarm's nodePools[].nodes as the
// chart reads it: power is copied into the pool entry as it is.
type snippetNode struct {
	Name  string              `json:"name"`
	MAC   string              `json:"mac"`
	IP    string              `json:"ip"`
	Power *v1alpha1.PowerSpec `json:"power,omitempty"`
}

// The snippet is the chart's node shape: its entry lines parse as one
// kubefarm node with the entry's values, its power field for field, and
// nothing else.
func TestValuesSnippet(t *testing.T) {
	for _, tc := range []struct {
		name  string
		entry v1alpha1.MachineEntry
	}{
		{"no power", v1alpha1.MachineEntry{Name: "node7", MACs: []string{"52:54:00:12:34:56"}, IP: "10.28.72.14"}},
		{"ipmi", v1alpha1.MachineEntry{Name: "node7", MACs: []string{"52:54:00:12:34:56"}, IP: "10.28.72.14",
			Power: &v1alpha1.PowerSpec{Driver: v1alpha1.PowerIPMI, Address: "10.20.0.21:623", CredentialsSecret: "1e3"}}},
		{"redfish with a CA", v1alpha1.MachineEntry{Name: "node7", MACs: []string{"52:54:00:12:34:56"}, IP: "10.28.72.14",
			Power: &v1alpha1.PowerSpec{Driver: v1alpha1.PowerRedfish, Address: "https://10.20.0.31/redfish/v1/Systems/1",
				CredentialsSecret: "bmc-rack2", CASecret: "bmc-ca"}}},
		{"redfish insecure", v1alpha1.MachineEntry{Name: "node7", MACs: []string{"52:54:00:12:34:56"}, IP: "10.28.72.14",
			Power: &v1alpha1.PowerSpec{Driver: v1alpha1.PowerRedfish, Address: "http://10.20.0.31:8000",
				CredentialsSecret: "bmc-rack2", InsecureSkipVerify: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ValuesSnippet(enrollPool(), "Helm release farm1 in namespace farm1", tc.entry)
			for _, want := range []string{"NodePool farm1/farm1-pool0 is managed by Helm release farm1", "did not change it", "name: pool0", "under nodes:"} {
				if !strings.Contains(s, want) {
					t.Errorf("snippet does not say %q:\n%s", want, s)
				}
			}
			var nodes []snippetNode
			if err := yaml.UnmarshalStrict([]byte(s), &nodes); err != nil {
				t.Fatalf("%v:\n%s", err, s)
			}
			want := []snippetNode{{Name: "node7", MAC: "52:54:00:12:34:56", IP: "10.28.72.14", Power: tc.entry.Power}}
			if !reflect.DeepEqual(nodes, want) {
				t.Errorf("nodes %+v, want %+v:\n%s", nodes, want, s)
			}
		})
	}
}

func TestEnrollPatch(t *testing.T) {
	entry := v1alpha1.MachineEntry{Name: "node7", MACs: []string{"52:54:00:12:34:56"}, IP: "10.28.72.14"}
	var ops []map[string]any
	if err := json.Unmarshal(EnrollPatch(enrollPool(), entry), &ops); err != nil {
		t.Fatal(err)
	}
	if len(ops) != 2 || ops[0]["op"] != "replace" || ops[0]["path"] != "/metadata/resourceVersion" || ops[0]["value"] != "42" ||
		ops[1]["op"] != "add" || ops[1]["path"] != "/spec/machines/-" {
		t.Errorf("patch %v", ops)
	}
	// The entry's power goes in the patch as spec.power's JSON.
	entry.Power = &v1alpha1.PowerSpec{Driver: v1alpha1.PowerRedfish, Address: "https://10.20.0.31", CredentialsSecret: "bmc-rack2", CASecret: "bmc-ca"}
	var raw []struct {
		Value json.RawMessage `json:"value"`
	}
	patch := EnrollPatch(enrollPool(), entry)
	if err := json.Unmarshal(patch, &raw); err != nil || len(raw) != 2 {
		t.Fatalf("patch %s: %v", patch, err)
	}
	var added v1alpha1.MachineEntry
	if err := json.Unmarshal(raw[1].Value, &added); err != nil || !reflect.DeepEqual(added, entry) {
		t.Errorf("patch %s: want the entry %+v with its power", patch, entry)
	}
	if !strings.Contains(string(patch), `"power":{"driver":"redfish","address":"https://10.20.0.31","credentialsSecret":"bmc-rack2","caSecret":"bmc-ca"}`) {
		t.Errorf("patch %s lacks the power as spec.power's fields", patch)
	}
	empty := enrollPool()
	empty.Spec.Machines = nil
	if err := json.Unmarshal(EnrollPatch(empty, entry), &ops); err != nil {
		t.Fatal(err)
	}
	if ops[1]["path"] != "/spec/machines" {
		t.Errorf("patch of a pool without machines %v: want the list added", ops)
	}
}

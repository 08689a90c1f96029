package desired

import (
	"encoding/json"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func TestClaimsJSON(t *testing.T) {
	ms, err := Machines(testPool())
	if err != nil {
		t.Fatal(err)
	}
	cs := Claims(ms[1])
	var names []string
	for _, c := range cs {
		names = append(names, c.Name)
	}
	if want := []string{"mac-02-00-0a-1c-00-0c", "mac-02-00-0a-1c-01-0c", "ip-10-28-0-12"}; !slices.Equal(names, want) {
		t.Fatalf("claim names = %v, want %v (the MACs in order, then the IP)", names, want)
	}
	got, err := json.Marshal(cs[0])
	if err != nil {
		t.Fatal(err)
	}
	want := `{"kind":"AddressClaim","apiVersion":"kubefarm.io/v1alpha1",` +
		`"metadata":{"name":"mac-02-00-0a-1c-00-0c","labels":{"app.kubernetes.io/managed-by":"kubefarm"}},` +
		`"spec":{"kind":"MAC","address":"02:00:0a:1c:00:0c","holder":{"namespace":"tenants","pool":"workers","machine":"workers-m2"}}}`
	if string(got) != want {
		t.Fatalf("claim JSON\n got %s\nwant %s", got, want)
	}
	if ip := cs[2].Spec; ip.Kind != kubefarmv1.AddressIPv4 || ip.Address != "10.28.0.12" {
		t.Errorf("IP claim spec = %+v", ip)
	}
}

func TestAddressClaimName(t *testing.T) {
	for _, tt := range []struct {
		kind       kubefarmv1.AddressKind
		addr, want string
	}{
		{kubefarmv1.AddressMAC, "52:54:00:de:00:01", "mac-52-54-00-de-00-01"},
		{kubefarmv1.AddressIPv4, "10.123.0.11", "ip-10-123-0-11"},
		{kubefarmv1.AddressIPv4, "255.255.255.255", "ip-255-255-255-255"},
	} {
		if got := kubefarmv1.AddressClaimName(tt.kind, tt.addr); got != tt.want {
			t.Errorf("AddressClaimName(%s, %s) = %s, want %s", tt.kind, tt.addr, got, tt.want)
		}
	}
}

func TestUnwantedAndUses(t *testing.T) {
	machine := func(name, ip string, macs ...string) *kubefarmv1.Machine {
		return &kubefarmv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: name},
			Spec: kubefarmv1.MachineSpec{Pool: "workers", MACs: macs, IP: ip}}
	}
	claimsOf := func(ms ...*kubefarmv1.Machine) []kubefarmv1.AddressClaim {
		var out []kubefarmv1.AddressClaim
		for _, m := range ms {
			for _, c := range Claims(m) {
				out = append(out, *c)
			}
		}
		return out
	}
	byHand := func(cs []kubefarmv1.AddressClaim) []kubefarmv1.AddressClaim {
		for i := range cs {
			cs[i].Labels = nil
		}
		return cs
	}
	m1 := machine("workers-m1", "10.0.0.1", "02:00:00:00:00:01")
	m2 := machine("workers-m2", "10.0.0.2", "02:00:00:00:00:02", "02:00:00:00:01:02")
	// m1 readdressed: same name, a new MAC and IP.
	m1moved := machine("workers-m1", "10.0.0.9", "02:00:00:00:00:09")
	// The MAC of m1 moved to m3 in the same pool: the claim names m1, so it
	// is unwanted although the address is still wanted, by another holder.
	m3 := machine("workers-m3", "10.0.0.3", "02:00:00:00:00:01")

	for _, tt := range []struct {
		name    string
		held    []kubefarmv1.AddressClaim
		desired []*kubefarmv1.Machine
		want    []string
	}{
		{"all wanted", claimsOf(m1, m2), []*kubefarmv1.Machine{m1, m2}, nil},
		{"entry removed", claimsOf(m1, m2), []*kubefarmv1.Machine{m2}, []string{"mac-02-00-00-00-00-01", "ip-10-0-0-1"}},
		{"pool gone", claimsOf(m1), nil, []string{"mac-02-00-00-00-00-01", "ip-10-0-0-1"}},
		{"readdressed", claimsOf(m1, m1moved), []*kubefarmv1.Machine{m1moved}, []string{"mac-02-00-00-00-00-01", "ip-10-0-0-1"}},
		{"address moved to another machine", claimsOf(m1), []*kubefarmv1.Machine{m3}, []string{"mac-02-00-00-00-00-01", "ip-10-0-0-1"}},
		{"nothing held", nil, []*kubefarmv1.Machine{m1}, nil},
		{"claims made by hand are not the controller's to free", byHand(claimsOf(m1, m2)), []*kubefarmv1.Machine{m2}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, c := range Unwanted(tt.held, tt.desired) {
				got = append(got, c.Name)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Unwanted = %v, want %v", got, tt.want)
			}
		})
	}

	mac1, ip1 := Claims(m1)[0], Claims(m1)[1]
	other := machine("workers-m1", "10.0.0.1", "02:00:00:00:00:01")
	other.Spec.Pool = "other"
	unknown := mac1.DeepCopy()
	unknown.Spec.Kind = "IPv6"
	for _, tt := range []struct {
		name  string
		m     *kubefarmv1.Machine
		claim *kubefarmv1.AddressClaim
		want  bool
	}{
		{"holder lists the MAC", m1, mac1, true},
		{"holder has the IP", m1, ip1, true},
		{"holder does not exist", nil, mac1, false},
		{"holder readdressed (MAC)", m1moved, mac1, false},
		{"holder readdressed (IP)", m1moved, ip1, false},
		{"a Machine of that name in another pool", other, mac1, false},
		{"a kind this code does not know is kept", m1, unknown, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Uses(tt.m, tt.claim); got != tt.want {
				t.Errorf("Uses = %v, want %v", got, tt.want)
			}
		})
	}
}

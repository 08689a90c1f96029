package leases

import (
	"fmt"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func testPool() *kubefarmv1.NodePool {
	return &kubefarmv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "rack1"},
		Spec: kubefarmv1.NodePoolSpec{
			Cluster: "c1", BootImage: "img",
			Network: kubefarmv1.BootNetwork{
				Subnet: "10.28.0.0/16", Gateway: "10.28.0.1", DNS: []string{"10.28.0.1", "1.1.1.1"},
				Domain: "farm.example", LeaseTime: &metav1.Duration{Duration: 30 * time.Minute},
			},
			Tags: map[string]kubefarmv1.TagSpec{
				"ntp":   {DHCPOptions: []kubefarmv1.DHCPOption{{Code: 42, Value: "0x0a1c0001"}, {Code: 17, Value: "/root"}}},
				"later": {DHCPOptions: []kubefarmv1.DHCPOption{{Code: 17, Value: "/other"}}},
				"plain": {KernelArgs: []string{"quiet"}},
				"bad":   {DHCPOptions: []kubefarmv1.DHCPOption{{Code: 43, Value: "0xzz"}}},
				"res":   {DHCPOptions: []kubefarmv1.DHCPOption{{Code: 67, Value: "evil.efi"}}},
				"empty": {DHCPOptions: []kubefarmv1.DHCPOption{{Code: 43, Value: ""}}},
			},
		},
	}
}

func testMachine(tags ...string) *kubefarmv1.Machine {
	return &kubefarmv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "rack1-m1"},
		Spec: kubefarmv1.MachineSpec{
			Pool: "rack1", Cluster: "c1", Hostname: "m1", IP: "10.28.0.11",
			MACs: []string{"52:54:00:00:00:01", "52:54:00:00:00:02"}, Tags: tags, DesiredImage: "img",
		},
	}
}

func TestFromObjects(t *testing.T) {
	mac1, _ := net.ParseMAC("52:54:00:00:00:01")
	mac2, _ := net.ParseMAC("52:54:00:00:00:02")
	base := Lease{
		IP: net.IP{10, 28, 0, 11}, Mask: net.CIDRMask(16, 32), Router: net.IP{10, 28, 0, 1},
		DNS: []net.IP{{10, 28, 0, 1}, {1, 1, 1, 1}}, Domain: "farm.example", Hostname: "m1",
		LeaseTime: 30 * time.Minute, Pool: "rack1", Machine: "farm/rack1-m1",
	}
	with := func(mac net.HardwareAddr, opts ...Option) Lease {
		l := base
		l.MAC = mac
		l.ExtraOptions = opts
		return l
	}

	tests := []struct {
		name    string
		machine *kubefarmv1.Machine
		pool    func(*kubefarmv1.NodePool)
		want    []Lease
		wantErr string
	}{
		{name: "one lease per mac", machine: testMachine(), want: []Lease{with(mac1), with(mac2)}},
		{name: "tags without options", machine: testMachine("plain"), want: []Lease{with(mac1), with(mac2)}},
		{name: "tag options sorted, hex and text", machine: testMachine("ntp"),
			want: []Lease{with(mac1, Option{17, []byte("/root")}, Option{42, []byte{10, 28, 0, 1}}),
				with(mac2, Option{17, []byte("/root")}, Option{42, []byte{10, 28, 0, 1}})}},
		{name: "later tag overrides", machine: testMachine("ntp", "later"),
			want: []Lease{with(mac1, Option{17, []byte("/other")}, Option{42, []byte{10, 28, 0, 1}}),
				with(mac2, Option{17, []byte("/other")}, Option{42, []byte{10, 28, 0, 1}})}},
		{name: "default lease time", machine: testMachine(), pool: func(p *kubefarmv1.NodePool) { p.Spec.Network.LeaseTime = nil },
			want: func() []Lease {
				a, b := with(mac1), with(mac2)
				a.LeaseTime, b.LeaseTime = time.Hour, time.Hour
				return []Lease{a, b}
			}()},
		{name: "no gateway, no dns", machine: testMachine(), pool: func(p *kubefarmv1.NodePool) { p.Spec.Network.Gateway = ""; p.Spec.Network.DNS = nil },
			want: func() []Lease {
				a, b := with(mac1), with(mac2)
				a.Router, b.Router = nil, nil
				a.DNS, b.DNS = []net.IP{}, []net.IP{}
				return []Lease{a, b}
			}()},
		{name: "mask from /24", machine: testMachine(), pool: func(p *kubefarmv1.NodePool) { p.Spec.Network.Subnet = "10.28.0.0/24" },
			want: func() []Lease {
				a, b := with(mac1), with(mac2)
				a.Mask, b.Mask = net.CIDRMask(24, 32), net.CIDRMask(24, 32)
				return []Lease{a, b}
			}()},
		{name: "undefined tag", machine: testMachine("nope"), wantErr: `tag "nope" is not defined`},
		{name: "bad hex", machine: testMachine("bad"), wantErr: "bad hex"},
		{name: "reserved code", machine: testMachine("res"), wantErr: "option 67 cannot be set"},
		{name: "empty value", machine: testMachine("empty"), wantErr: "1 to 255 bytes"},
		{name: "other pool", machine: func() *kubefarmv1.Machine { m := testMachine(); m.Spec.Pool = "rack2"; return m }(), wantErr: "belongs to pool"},
		{name: "other namespace", machine: func() *kubefarmv1.Machine { m := testMachine(); m.Namespace = "x"; return m }(), wantErr: "belongs to pool"},
		{name: "ip outside subnet", machine: func() *kubefarmv1.Machine { m := testMachine(); m.Spec.IP = "10.29.0.1"; return m }(), wantErr: "outside"},
		{name: "ipv6 ip", machine: func() *kubefarmv1.Machine { m := testMachine(); m.Spec.IP = "fe80::1"; return m }(), wantErr: "not IPv4"},
		{name: "bad mac", machine: func() *kubefarmv1.Machine {
			m := testMachine()
			m.Spec.MACs = []string{"02:00:00:00:00:00:00:01"}
			return m
		}(), wantErr: "not an Ethernet"},
		{name: "bad subnet", machine: testMachine(), pool: func(p *kubefarmv1.NodePool) { p.Spec.Network.Subnet = "fd00::/64" }, wantErr: "not an IPv4 CIDR"},
		{name: "bad dns", machine: testMachine(), pool: func(p *kubefarmv1.NodePool) { p.Spec.Network.DNS = []string{"x"} }, wantErr: "DNS"},
		{name: "bad gateway", machine: testMachine(), pool: func(p *kubefarmv1.NodePool) { p.Spec.Network.Gateway = "x" }, wantErr: "gateway"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := testPool()
			if tt.pool != nil {
				tt.pool(pool)
			}
			got, err := FromObjects(tt.machine, pool)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
	if _, err := FromObjects(nil, testPool()); err == nil {
		t.Fatal("nil machine accepted")
	}
}

func TestParseOptionValue(t *testing.T) {
	long := strings.Repeat("a", 256)
	tests := []struct {
		in   string
		want []byte
		err  bool
	}{
		{"text", []byte("text"), false},
		{"0x0102ff", []byte{1, 2, 0xff}, false},
		{"0X01", []byte("0X01"), false}, // only lowercase 0x means hex, as the API documents
		{"0x", nil, true},
		{"0x1", nil, true},
		{"", nil, true},
		{long, nil, true},
		{strings.Repeat("a", 255), []byte(strings.Repeat("a", 255)), false},
	}
	for _, tt := range tests {
		got, err := ParseOptionValue(tt.in)
		if (err != nil) != tt.err || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q: got %v, %v", tt.in, got, err)
		}
	}
}

// The pool's `all` tag applies to every machine, first, as in kubefarm's
// chart: its options reach the lease of a machine that names no tag, and a
// machine's own tag overrides it for the same code.
func TestAllTagOptions(t *testing.T) {
	pool := testPool()
	pool.Spec.Tags["all"] = kubefarmv1.TagSpec{DHCPOptions: []kubefarmv1.DHCPOption{{Code: 17, Value: "/all"}, {Code: 40, Value: "farm"}}}
	for _, tc := range []struct {
		tags []string
		want string
	}{{nil, "[17=/all 40=farm]"}, {[]string{"later"}, "[17=/other 40=farm]"}} {
		got, err := FromObjects(testMachine(tc.tags...), pool)
		if err != nil {
			t.Fatal(err)
		}
		var opts []string
		for _, o := range got[0].ExtraOptions {
			opts = append(opts, fmt.Sprintf("%d=%s", o.Code, o.Value))
		}
		if fmt.Sprint(opts) != tc.want {
			t.Errorf("tags %v: options %v, want %s", tc.tags, opts, tc.want)
		}
	}
}

package httpboot

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/bootpaths"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
)

// goodReport is a full report as the agent sends it.
func goodReport() map[string]any {
	return map[string]any{
		"mac": "52:54:00:AB:CD:EF",
		"hardware": map[string]any{
			"system":      map[string]any{"vendor": "QEMU", "product": "Standard PC (Q35 + ICH9, 2009)", "serial": "S-123", "uuid": "4c4c4544-0042-3510-8052-b4c04f4e3232"},
			"cpu":         map[string]any{"model": "Intel(R) Xeon(R) CPU", "count": 4},
			"memoryBytes": 2 << 30,
			"disks":       []any{map[string]any{"name": "vda", "sizeBytes": 20 << 30, "model": "QEMU HARDDISK", "serial": "disk-serial-1", "rotational": true}},
			"nics":        []any{map[string]any{"mac": "52:54:00:ab:cd:ef", "name": "eth0", "driver": "virtio_net", "speedMbps": 1000, "link": true}},
			"bmcAddress":  "10.1.0.5",
		},
	}
}

func body(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// with returns goodReport with path (dot separated; a number indexes a
// list) set to v.
func with(path string, v any) map[string]any {
	r := goodReport()
	parts := strings.Split(path, ".")
	var cur any = r
	for i, p := range parts {
		last := i == len(parts)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				c[p] = v
			} else {
				cur = c[p]
			}
		case []any:
			var n int
			fmt.Sscan(p, &n)
			if last {
				c[n] = v
			} else {
				cur = c[n]
			}
		}
	}
	return r
}

func TestParseDiscoveryReport(t *testing.T) {
	rep, err := ParseDiscoveryReport(body(t, goodReport()))
	if err != nil {
		t.Fatal(err)
	}
	if rep.MAC != "52:54:00:ab:cd:ef" || rep.Hardware.MemoryMiB != 2048 || rep.Hardware.Disks[0].Serial != "disk-serial-1" ||
		rep.Hardware.NICs[0].SpeedMbps != 1000 || rep.Hardware.System.Vendor != "QEMU" || rep.Hardware.CPU.Count != 4 {
		t.Errorf("report %+v", rep)
	}
	many := func(n int, item func(int) any) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = item(i)
		}
		return out
	}
	disk := func(i int) any { return map[string]any{"name": fmt.Sprintf("sd%d", i)} }
	nic := func(i int) any { return map[string]any{"mac": fmt.Sprintf("02:00:00:00:00:%02x", i)} }
	for _, tc := range []struct {
		name string
		body []byte
		err  string // "" accepts
	}{
		{"minimal", []byte(`{"mac":"02:00:00:00:00:01","hardware":{}}`), ""},
		{"MiB that agrees", body(t, with("hardware.memoryMiB", 2048)), ""},
		{"64 disks", body(t, with("hardware.disks", many(64, disk))), ""},
		{"32 NICs", body(t, with("hardware.nics", many(32, nic))), ""},
		{"128-byte serial", body(t, with("hardware.system.serial", strings.Repeat("s", 128))), ""},
		{"not JSON", []byte(`mac=1`), "malformed JSON"},
		{"empty", nil, "malformed JSON"},
		{"unknown field", []byte(`{"mac":"02:00:00:00:00:01","hardware":{},"token":"x"}`), "unknown field"},
		{"unknown nested field", []byte(`{"mac":"02:00:00:00:00:01","hardware":{"gpu":"x"}}`), "unknown field"},
		{"wrong type", []byte(`{"mac":"02:00:00:00:00:01","hardware":{"cpu":{"count":"4"}}}`), "wrong type"},
		{"two objects", []byte(`{"mac":"02:00:00:00:00:01"}{"mac":"02:00:00:00:00:02"}`), "data after"},
		{"trailing garbage", []byte(`{"mac":"02:00:00:00:00:01"} x`), "data after"},
		{"no MAC", []byte(`{"hardware":{}}`), "mac: "},
		{"bad MAC", body(t, with("mac", "02:00:00:00:00")), "mac: "},
		{"129-byte serial", body(t, with("hardware.system.serial", strings.Repeat("s", 129))), "hardware.system.serial is 129 bytes, over 128"},
		{"long vendor", body(t, with("hardware.system.vendor", strings.Repeat("v", 200))), "hardware.system.vendor is 200 bytes"},
		{"long uuid", body(t, with("hardware.system.uuid", strings.Repeat("u", 65))), "hardware.system.uuid is 65 bytes, over 64"},
		{"terminal escape", body(t, with("hardware.system.product", "\x1b]0;owned\x07")), "hardware.system.product must be printable"},
		{"newline", body(t, with("hardware.cpu.model", "a\nb")), "hardware.cpu.model must be printable"},
		{"invalid UTF-8", []byte("{\"mac\":\"02:00:00:00:00:01\",\"hardware\":{\"system\":{\"vendor\":\"\xff\"}}}"), "must be printable"},
		{"negative CPUs", body(t, with("hardware.cpu.count", -1)), "hardware.cpu.count -1"},
		{"too many CPUs", body(t, with("hardware.cpu.count", 65537)), "hardware.cpu.count 65537"},
		{"negative memory", body(t, with("hardware.memoryBytes", -1)), "hardware.memoryBytes -1 is negative"},
		{"MiB that disagrees", body(t, with("hardware.memoryMiB", 9999)), "hardware.memoryMiB 9999 is not memoryBytes in MiB (2048)"},
		{"BMC not IPv4", body(t, with("hardware.bmcAddress", "fe80::1")), "hardware.bmcAddress"},
		{"BMC a name", body(t, with("hardware.bmcAddress", "bmc.example")), "hardware.bmcAddress"},
		{"65 disks", body(t, with("hardware.disks", many(65, disk))), "hardware.disks has 65 entries, over 64"},
		{"33 NICs", body(t, with("hardware.nics", many(33, nic))), "hardware.nics has 33 entries, over 32"},
		{"disk without a name", body(t, with("hardware.disks.0.name", "")), "hardware.disks[0].name is empty"},
		{"long disk name", body(t, with("hardware.disks.0.name", strings.Repeat("d", 33))), "hardware.disks[0].name is 33 bytes"},
		{"long disk model", body(t, with("hardware.disks.0.model", strings.Repeat("d", 129))), "hardware.disks[0].model is 129 bytes"},
		{"negative disk size", body(t, with("hardware.disks.0.sizeBytes", -5)), "hardware.disks[0].sizeBytes -5"},
		{"NIC without a MAC", body(t, with("hardware.nics.0.mac", "")), "hardware.nics[0].mac"},
		{"long driver", body(t, with("hardware.nics.0.driver", strings.Repeat("d", 65))), "hardware.nics[0].driver is 65 bytes, over 64"},
		{"negative speed", body(t, with("hardware.nics.0.speedMbps", -1)), "hardware.nics[0].speedMbps -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDiscoveryReport(tc.body)
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want %q", err, tc.err)
			}
		})
	}
}

// FuzzParseDiscoveryReport: whatever the body, the parser does not panic,
// and a report it accepts is within every bound of the API type, its MACs
// in the API's form, and encodes back to at most MaxDiscoveryReport.
func FuzzParseDiscoveryReport(f *testing.F) {
	b, _ := json.Marshal(goodReport())
	for _, s := range []string{string(b), `{"mac":"02:00:00:00:00:01","hardware":{}}`, `{}`, `[]`, `{"mac":"02-00-00-00-00-01","hardware":{"disks":[{"name":"x"}]}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > bootproto.MaxDiscoveryReport {
			return
		}
		rep, err := ParseDiscoveryReport(in)
		if err != nil {
			return
		}
		mac := func(s string) bool {
			n, err := bootproto.NormalizeMAC(s)
			return err == nil && n == s
		}
		hw := rep.Hardware
		if !mac(rep.MAC) || len(hw.Disks) > bootproto.MaxDiscoveryDisks || len(hw.NICs) > bootproto.MaxDiscoveryNICs ||
			len(hw.System.Serial) > 128 || len(hw.System.UUID) > 64 || hw.MemoryBytes < 0 || hw.MemoryMiB != hw.MemoryBytes>>20 ||
			hw.CPU.Count < 0 || hw.CPU.Count > bootproto.MaxDiscoveryCPUs || len(hw.BMCAddress) > 15 {
			t.Fatalf("accepted out of bounds: %+v", rep)
		}
		for _, n := range hw.NICs {
			if !mac(n.MAC) || len(n.Name) > 32 || len(n.Driver) > 64 || !bootproto.Printable(n.Driver) {
				t.Fatalf("accepted NIC out of bounds: %+v", n)
			}
		}
		for _, d := range hw.Disks {
			if d.Name == "" || len(d.Name) > 32 || len(d.Model) > 128 || len(d.Serial) > 128 || d.SizeBytes < 0 || !bootproto.Printable(d.Serial) {
				t.Fatalf("accepted disk out of bounds: %+v", d)
			}
		}
		for _, s := range []string{hw.System.Vendor, hw.System.Product, hw.System.Serial, hw.System.UUID, hw.CPU.Model} {
			if !bootproto.Printable(s) {
				t.Fatalf("accepted unprintable %q", s)
			}
		}
		if out, _ := json.Marshal(rep); len(out) > bootproto.MaxDiscoveryReport*2 {
			t.Fatalf("accepted report encodes to %d bytes", len(out))
		}
	})
}

// TestMaxDiscoveryReportFits: the largest report the bounds allow fits in
// MaxDiscoveryReport, so that the body bound never refuses a valid report.
func TestMaxDiscoveryReportFits(t *testing.T) {
	s := func(n int) string { return strings.Repeat("x", n) }
	hw := kubefarmv1.HardwareFacts{
		System:      kubefarmv1.SystemFacts{Vendor: s(128), Product: s(128), Serial: s(128), UUID: s(64)},
		CPU:         kubefarmv1.CPUFacts{Model: s(128), Count: 65536},
		MemoryBytes: 1 << 62, MemoryMiB: 1 << 42, BMCAddress: "255.255.255.255",
	}
	for i := 0; i < bootproto.MaxDiscoveryDisks; i++ {
		hw.Disks = append(hw.Disks, kubefarmv1.DiskFacts{Name: s(32), SizeBytes: 1 << 62, Model: s(128), Serial: s(128), Rotational: true})
	}
	for i := 0; i < bootproto.MaxDiscoveryNICs; i++ {
		hw.NICs = append(hw.NICs, kubefarmv1.NICFacts{MAC: "02:00:00:00:00:01", Name: s(32), Driver: s(64), SpeedMbps: 1 << 30, Link: true})
	}
	b, err := json.MarshalIndent(bootproto.DiscoveryReport{MAC: "02:00:00:00:00:01", Hardware: hw}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > bootproto.MaxDiscoveryReport {
		t.Errorf("largest valid report is %d bytes, over MaxDiscoveryReport %d", len(b), bootproto.MaxDiscoveryReport)
	}
	if _, err := ParseDiscoveryReport(b); err != nil {
		t.Errorf("largest valid report refused: %v", err)
	}
}

func TestDiscoveryPath(t *testing.T) {
	if r, _ := bootpaths.Parse(bootproto.DiscoveryPath); r != bootpaths.RouteDiscovery {
		t.Errorf("bootproto.DiscoveryPath %q routes to %q", bootproto.DiscoveryPath, r)
	}
	if u := bootpaths.Base(base).Discovery(); u != base+bootproto.DiscoveryPath {
		t.Errorf("Base.Discovery = %q", u)
	}
}

func TestDecideDiscoveryWrite(t *testing.T) {
	now := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	spec := func(seen time.Time, edit func(*kubefarmv1.DiscoveredMachineSpec)) kubefarmv1.DiscoveredMachineSpec {
		s := kubefarmv1.DiscoveredMachineSpec{MAC: "02:00:00:00:00:01", IP: "10.0.0.150", Pool: "t1/workers", LastSeen: metav1.NewTime(seen),
			Hardware: kubefarmv1.HardwareFacts{MemoryBytes: 1 << 30, MemoryMiB: 1024, Disks: []kubefarmv1.DiskFacts{{Name: "vda", Serial: "s1"}}}}
		if edit != nil {
			edit(&s)
		}
		return s
	}
	obj := func(s kubefarmv1.DiscoveredMachineSpec) *kubefarmv1.DiscoveredMachine {
		return &kubefarmv1.DiscoveredMachine{Spec: s}
	}
	const refresh = 5 * time.Minute
	for _, tc := range []struct {
		name string
		cur  *kubefarmv1.DiscoveredMachine
		want DiscoveryWrite
	}{
		{"none yet", nil, WriteCreate},
		{"same, seen a minute ago", obj(spec(now.Add(-time.Minute), nil)), WriteNone},
		{"same, seen just under refresh ago", obj(spec(now.Add(-refresh+time.Second), nil)), WriteNone},
		{"same, seen refresh ago", obj(spec(now.Add(-refresh), nil)), WriteUpdate},
		{"new address", obj(spec(now, func(s *kubefarmv1.DiscoveredMachineSpec) { s.IP = "10.0.0.151" })), WriteUpdate},
		{"new pool", obj(spec(now, func(s *kubefarmv1.DiscoveredMachineSpec) { s.Pool = "t1/other" })), WriteUpdate},
		{"new disk serial", obj(spec(now, func(s *kubefarmv1.DiscoveredMachineSpec) { s.Hardware.Disks[0].Serial = "s2" })), WriteUpdate},
		{"disk gone", obj(spec(now, func(s *kubefarmv1.DiscoveredMachineSpec) { s.Hardware.Disks = nil })), WriteUpdate},
		{"empty list is no list", obj(spec(now, func(s *kubefarmv1.DiscoveredMachineSpec) { s.Hardware.NICs = []kubefarmv1.NICFacts{} })), WriteNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DecideDiscoveryWrite(tc.cur, spec(now, nil), refresh); got != tc.want {
				t.Errorf("DecideDiscoveryWrite = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestKnownSet: the cap counts watched names and created-not-yet-seen
// ones, each once; a reservation that was not created is given back; a
// pending one lapses after pendingTTL.
func TestKnownSet(t *testing.T) {
	now := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	k := newKnownSet(func() time.Time { return now })
	k.seen("a")
	if !k.reserve("a", 1) {
		t.Error("a name already counted was refused")
	}
	if k.reserve("b", 1) {
		t.Error("b reserved over a cap of 1")
	}
	first, second := k.reserve("b", 3), k.reserve("b", 3)
	if !first || !second || k.count() != 2 {
		t.Errorf("b reserved twice (%v, %v) counts %d, want 2", first, second, k.count())
	}
	if !k.reserve("c", 3) || k.reserve("d", 3) {
		t.Error("cap of 3: c must fit, d must not")
	}
	k.release("c")
	k.seen("b") // the watch shows b: pending -> seen, still one
	if k.count() != 2 || !k.reserve("d", 3) {
		t.Errorf("count %d after release and seen, want 2, and d to fit", k.count())
	}
	k.gone("a")
	if k.count() != 2 {
		t.Errorf("count %d after a is gone, want 2", k.count())
	}
	now = now.Add(pendingTTL + time.Second)
	if !k.reserve("e", 2) || k.count() != 2 {
		t.Errorf("d's reservation did not lapse: count %d", k.count())
	}
}

// TestSourceLimiter: each source has its own bucket; the table holds at
// most max sources, sweeping idle ones before refusing a new one.
func TestSourceLimiter(t *testing.T) {
	now := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	s := newSourceLimiter(rate.Every(5*time.Second), 2, 2, func() time.Time { return now })
	for i, want := range []bool{true, true, false} {
		if got := s.allow("a"); got != want {
			t.Errorf("a's request %d allowed %v, want %v (a burst of 2, then refused)", i+1, got, want)
		}
	}
	if !s.allow("b") {
		t.Error("b has its own bucket")
	}
	if s.allow("c") {
		t.Error("c admitted into a full table of busy sources")
	}
	now = now.Add(10 * time.Second) // a and b refilled: idle
	if !s.allow("c") {
		t.Error("c refused although idle sources could be swept")
	}
	if len(s.m) > 2 {
		t.Errorf("table holds %d sources, max 2", len(s.m))
	}
}

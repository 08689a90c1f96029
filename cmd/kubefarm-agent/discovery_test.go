package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/kubefarm/kubefarm/pxe/bootproto"
)

func TestDiscoveryWait(t *testing.T) {
	for _, tc := range []struct {
		name       string
		secs       int32
		failures   int
		retryAfter time.Duration
		r          float64
		want       time.Duration
	}{
		{"the answer's interval, no jitter", 60, 0, 0, 0.5, 60 * time.Second},
		{"-20%", 60, 0, 0, 0, 48 * time.Second},
		{"+20% (almost)", 60, 0, 0, 0.999999, 72 * time.Second},
		{"no interval named: the default", 0, 0, 0, 0.5, discoveryDefault},
		{"an interval under the floor", 1, 0, 0, 0.5, discoveryFloor},
		{"an interval over the ceiling", 86400, 0, 0, 0.999999, discoveryCeiling},
		{"first failure: the backoff, floored", 60, 1, 0, 0.5, discoveryFloor},
		{"third failure: doubled twice", 60, 3, 0, 0.5, 20 * time.Second},
		{"many failures: the maximum backoff", 60, 40, 0, 0.5, discoveryMaxBackoff},
		{"a longer Retry-After wins", 60, 1, 90 * time.Second, 0.5, 90 * time.Second},
		{"a shorter Retry-After does not", 60, 4, 2 * time.Second, 0.5, 40 * time.Second},
		{"Retry-After within the ceiling", 60, 1, time.Hour, 0.999999, discoveryCeiling},
	} {
		got := discoveryWait(tc.secs, tc.failures, tc.retryAfter, tc.r)
		if got.Round(time.Millisecond) != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// discoveryPXE stands for kubefarm-pxe's /discovery: it answers the codes
// in order (200 with answers[i]) and records what it is sent; anything
// else is recorded as a request a discovery boot must not make.
type discoveryPXE struct {
	mu      sync.Mutex
	codes   []int
	enroll  []bool
	reports []bootproto.DiscoveryReport
	auth    []string
	other   []string
}

func (f *discoveryPXE) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != bootproto.DiscoveryPath {
		f.other = append(f.other, r.Method+" "+r.URL.Path)
		http.Error(w, "not in discovery mode", http.StatusForbidden)
		return
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	var rep bootproto.DiscoveryReport
	if err := dec.Decode(&rep); err != nil {
		http.Error(w, "bad report", 400)
		return
	}
	if _, err := rep.Validate(); err != nil {
		http.Error(w, "bad report: "+err.Error(), 400)
		return
	}
	i := len(f.reports)
	f.reports = append(f.reports, rep)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	code := f.codes[min(i, len(f.codes)-1)]
	if code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "30")
	}
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(bootproto.DiscoveryAnswer{Enrolled: f.enroll[min(i, len(f.enroll)-1)], ReportAfterSeconds: 60})
}

// discoveryRoot is nodeRoot booted in discovery mode: the command line
// has kubefarm.mode=discover, no boot secret is there, and the root has a
// machine's DMI, memory, a virtio disk and a NIC.
func discoveryRoot(t *testing.T, server string) Options {
	t.Helper()
	o := nodeRoot(t, server)
	if err := os.Remove(o.BootSecretFile); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		o.Cmdline: "console=ttyS0 initrd=initrd kubefarm.image=" + image + " kubefarm.rootfs=" + server + "/artifacts/" + image +
			" kubefarm.server=" + server + " BOOTIF=01-" + strings.ReplaceAll(mac, ":", "-") + " kubefarm.mode=discover\n",
		filepath.Join(o.Root, "sys/class/dmi/id/sys_vendor"):     "QEMU\n",
		filepath.Join(o.Root, "sys/class/dmi/id/product_name"):   "Standard PC (Q35 + ICH9, 2009)\n",
		filepath.Join(o.Root, "sys/class/dmi/id/product_serial"): "SN-42\n",
		filepath.Join(o.Root, "proc/meminfo"):                    "MemTotal:        2048000 kB\n",
		filepath.Join(o.Root, "proc/cpuinfo"):                    "processor\t: 0\nmodel name\t: QEMU Virtual CPU\n\nprocessor\t: 1\nmodel name\t: QEMU Virtual CPU\n",
		filepath.Join(o.Root, "sys/block/vda/size"):              "20971520\n",
		filepath.Join(o.Root, "sys/block/vda/serial"):            "KFDISK0001\n",
		filepath.Join(o.Root, "sys/block/vda/device/vendor"):     "0x1af4\n",
		filepath.Join(o.Root, "sys/class/net/enp1s0/address"):    mac + "\n",
		filepath.Join(o.Root, "sys/class/net/enp1s0/carrier"):    "1\n",
		filepath.Join(o.Root, "sys/class/net/enp1s0/device/x"):   "",
	}
	for p, data := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../../../bus/virtio/drivers/virtio_net", filepath.Join(o.Root, "sys/class/net/enp1s0/device/driver")); err != nil {
		t.Fatal(err)
	}
	return o
}

// TestDiscoveryMode: a discovery boot joins nothing, reports its facts,
// backs off on 429 and errors, reports again at the answer's pace, and
// reboots once when enrolled.
func TestDiscoveryMode(t *testing.T) {
	pxe := &discoveryPXE{
		codes:  []int{429, 200, 500, 503, 200},
		enroll: []bool{false, false, false, false, true},
	}
	srv := httptest.NewServer(pxe)
	defer srv.Close()
	o := discoveryRoot(t, srv.URL)

	var waits []time.Duration
	var console, modules []string
	reboots := 0
	joined := func(what string) error { t.Errorf("discovery mode %s", what); return errors.New("no") }
	deps := Deps{
		Guard:       func(context.Context, string) error { return joined("loaded the pod guard") },
		StartUnits:  func(_ context.Context, u ...string) error { return joined("started " + strings.Join(u, " ")) },
		SetHostname: func(string) error { return joined("set the host name") },
		Reboot:      func(context.Context) error { reboots++; return nil },
		After: func(d time.Duration) <-chan time.Time {
			waits = append(waits, d)
			c := make(chan time.Time, 1)
			c <- time.Time{}
			return c
		},
		LoadModules: func(_ context.Context, m ...string) error { modules = append(modules, m...); return nil },
		BMCAddress:  func(context.Context) (string, error) { return "10.0.9.7", nil },
		Console:     func(line string) { console = append(console, line) },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hb, err := run(ctx, o, deps, testr.New(t))
	if err != nil || hb != nil {
		t.Fatalf("run: %v, %v; want no error and no heartbeats", hb, err)
	}
	if reboots != 1 {
		t.Errorf("%d reboots, want 1", reboots)
	}
	if len(pxe.other) > 0 {
		t.Errorf("requests beside /discovery: %v", pxe.other)
	}
	if len(pxe.reports) != 5 {
		t.Fatalf("%d reports, want 5", len(pxe.reports))
	}
	for i, a := range pxe.auth {
		if a != "" {
			t.Errorf("report %d carried Authorization %q", i, a)
		}
	}
	rep := pxe.reports[0]
	hw := rep.Hardware
	if rep.MAC != mac || hw.System.Vendor != "QEMU" || hw.System.Serial != "SN-42" || hw.CPU.Count != 2 ||
		hw.MemoryBytes != 2048000*1024 || hw.MemoryMiB != 2000 || hw.BMCAddress != "10.0.9.7" ||
		len(hw.Disks) != 1 || hw.Disks[0].Serial != "KFDISK0001" || hw.Disks[0].SizeBytes != 10<<30 ||
		len(hw.NICs) != 1 || hw.NICs[0].Driver != "virtio_net" || !hw.NICs[0].Link {
		t.Errorf("report %+v", rep)
	}
	// 429 with Retry-After 30 s; the answer's 60 s; a first failure (the
	// backoff, floored); a second; then enrolled, no wait.
	within := func(d, lo, hi time.Duration) bool { return d >= lo && d <= hi }
	if len(waits) != 4 || !within(waits[0], 24*time.Second, 36*time.Second) || !within(waits[1], 48*time.Second, 72*time.Second) ||
		waits[2] != discoveryFloor || !within(waits[3], discoveryFloor, 12*time.Second) {
		t.Errorf("waits %v", waits)
	}
	if strings.Join(modules, " ") != "ipmi_si ipmi_devintf" {
		t.Errorf("modules %v", modules)
	}
	all := strings.Join(console, "\n")
	for _, want := range []string{"kubefarm: DISCOVERY MODE", "MAC " + mac, "kubectl kubefarm enroll 02-00-00-00-00-01",
		"reported MAC " + mac + ": QEMU Standard PC (Q35 + ICH9, 2009), serial SN-42, 2 CPUs, 2000 MiB, 1 disks, 1 NICs, BMC 10.0.9.7",
		"not accepted (POST /discovery: HTTP 429", "is enrolled; rebooting"} {
		if !strings.Contains(all, want) {
			t.Errorf("console has no %q:\n%s", want, all)
		}
	}
	if _, err := os.Stat(filepath.Join(o.Root, o.StateDir)); err == nil {
		t.Errorf("discovery mode wrote state in %s", o.StateDir)
	}
}

// TestDiscoveryModeRebootRetried: a failed reboot is tried again at the
// next enrolled answer; never enrolled, the loop ends with its context,
// rebooting nothing.
func TestDiscoveryModeRebootRetried(t *testing.T) {
	pxe := &discoveryPXE{codes: []int{200}, enroll: []bool{true}}
	srv := httptest.NewServer(pxe)
	defer srv.Close()
	o := discoveryRoot(t, srv.URL)
	reboots := 0
	deps := Deps{
		Reboot: func(context.Context) error {
			reboots++
			if reboots == 1 {
				return errors.New("systemctl reboot --force: exit status 1")
			}
			return nil
		},
		After: func(time.Duration) <-chan time.Time {
			c := make(chan time.Time, 1)
			c <- time.Time{}
			return c
		},
	}
	if _, err := run(context.Background(), o, deps, testr.New(t)); err != nil {
		t.Fatal(err)
	}
	if reboots != 2 || len(pxe.reports) != 2 {
		t.Errorf("%d reboots after %d reports, want 2 and 2", reboots, len(pxe.reports))
	}

	// Never enrolled: the loop runs until its context ends.
	pxe2 := &discoveryPXE{codes: []int{200}, enroll: []bool{false}}
	srv2 := httptest.NewServer(pxe2)
	defer srv2.Close()
	o2 := discoveryRoot(t, srv2.URL)
	ctx, cancel := context.WithCancel(context.Background())
	reboots = 0
	deps.After = func(time.Duration) <-chan time.Time {
		c := make(chan time.Time, 1)
		if pxe2.count() >= 3 {
			cancel()
		} else {
			c <- time.Time{}
		}
		return c
	}
	if _, err := run(ctx, o2, deps, testr.New(t)); err != nil {
		t.Fatal(err)
	}
	if reboots != 0 || pxe2.count() != 3 {
		t.Errorf("%d reboots, %d reports; want none and 3", reboots, pxe2.count())
	}
}

func (f *discoveryPXE) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reports)
}

// TestUnknownMode: a mode the agent does not know stops it before it asks
// kubefarm-pxe anything.
func TestUnknownMode(t *testing.T) {
	pxe := &discoveryPXE{codes: []int{200}, enroll: []bool{false}}
	srv := httptest.NewServer(pxe)
	defer srv.Close()
	o := discoveryRoot(t, srv.URL)
	if err := os.WriteFile(o.Cmdline, []byte("kubefarm.image="+image+" kubefarm.server="+srv.URL+" kubefarm.mode=rescue\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	if _, err := run(context.Background(), o, Deps{}, testr.New(t)); err == nil || !strings.Contains(err.Error(), "kubefarm.mode") {
		t.Errorf("run: %v", err)
	}
	if len(pxe.reports)+len(pxe.other) != 0 {
		t.Errorf("requests made: %d reports, %v", len(pxe.reports), pxe.other)
	}
}

package httpboot

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"k8s.io/client-go/tools/record"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/dynamic"
	"github.com/kubefarm/kubefarm/pxe/events"
)

// staticLeases are the catch-all ranges' leases, by MAC, as pxe/dynamic's
// Allocator finds them in its cache.
type staticLeases map[string]dynamic.Held

func (s staticLeases) LeaseOfMAC(_ context.Context, mac string) (dynamic.Held, bool) {
	h, ok := s[mac]
	return h, ok
}

func (s staticLeases) LeaseOfIP(_ context.Context, ip string) (dynamic.Held, bool) {
	for _, h := range s {
		if h.IP == ip {
			return h, true
		}
	}
	return dynamic.Held{}, false
}

// recorded takes the events fake has recorded so far.
func recorded(fake *record.FakeRecorder) []string {
	var got []string
	for len(fake.Events) > 0 {
		got = append(got, <-fake.Events)
	}
	return got
}

// TestMissingObjectEvents: a machine whose BootImage or NodePool does not
// exist gets a Warning naming it, once per event interval however often
// it retries, and 503 every time.
func TestMissingObjectEvents(t *testing.T) {
	f := newHandlerFixture(t, testr.New(t))
	now := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	fake := record.NewFakeRecorder(64)
	f.h.cfg.Events = events.New(fake, events.Config{Now: func() time.Time { return now }})
	// The fixture's machines share a name; these two need their own.
	f.machines.machines["02:00:00:00:00:03"].Name = "no-image"
	f.machines.machines["02:00:00:00:00:05"].Name = "no-pool"
	served := machine("img1", &kubefarmv1.ImageRef{Name: "deleted"})
	served.Name, served.Spec.MACs = "served-deleted", []string{"02:00:00:00:00:06"}
	f.machines.machines["02:00:00:00:00:06"] = served
	unnamed := machine("", nil)
	unnamed.Name, unnamed.Spec.MACs = "unnamed", []string{"02:00:00:00:00:07"}
	f.machines.machines["02:00:00:00:00:07"] = unnamed

	const answer = "kubefarm-pxe answers this machine's boot script requests 503 until"
	steps := []struct {
		name    string
		mac     string
		advance time.Duration
		want    string // the one event recorded, "" for none
	}{
		{"image missing", "02:00:00:00:00:03", 0,
			`Warning BootImageMissing BootImage "missing-image" (spec.desiredImage) not found: ` + answer + ` it exists (kubectl get bootimages)`},
		{"its retry", "02:00:00:00:00:03", 5 * time.Second, ""},
		{"its retry within the interval", "02:00:00:00:00:03", events.DefaultInterval - 6*time.Second, ""},
		{"pool missing", "02:00:00:00:00:05", 0,
			"Warning PoolMissing NodePool t1/gone (spec.pool) not found: " + answer + " it exists (kubectl get nodepools -n t1)"},
		{"the served image missing", "02:00:00:00:00:06", 0,
			`Warning BootImageMissing BootImage "deleted" (status.servedImage) not found: ` + answer + " it exists"},
		{"no image named", "02:00:00:00:00:07", 0,
			"Warning BootImageMissing the machine names no BootImage (spec.desiredImage is empty): " + answer + " it names one that exists"},
		{"image missing, an interval later", "02:00:00:00:00:03", time.Second,
			`Warning BootImageMissing BootImage "missing-image" (spec.desiredImage) not found`},
		{"pool missing, still within its interval", "02:00:00:00:00:05", 0, ""},
	}
	for _, st := range steps {
		now = now.Add(st.advance)
		if w := f.do("GET", "/boot/"+st.mac+".ipxe", nil); w.Code != 503 {
			t.Fatalf("%s: HTTP %d, want 503", st.name, w.Code)
		}
		got := recorded(fake)
		switch {
		case st.want == "" && len(got) != 0:
			t.Errorf("%s: recorded %q, want nothing", st.name, got)
		case st.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], st.want)):
			t.Errorf("%s: recorded %q, want one event starting %q", st.name, got, st.want)
		}
	}
}

// TestDiscoveryImageMissingEvent: the discovery boot of an unclaimed MAC
// whose Hold pool names a BootImage that does not exist is answered 503,
// and the pool gets a Warning at most once a minute, whichever of its
// machines asks; another pool gets its own.
func TestDiscoveryImageMissingEvent(t *testing.T) {
	f := newHandlerFixture(t, testr.New(t))
	now := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	fake := record.NewFakeRecorder(64)
	d, err := newDiscovery(DiscoveryConfig{MaxMachines: 10, Rate: 1, Burst: 1, Events: fake, Now: func() time.Time { return now }}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	f.h.cfg.Discovery = d
	workers := catchAll(kubefarmv1.UnknownHold)
	workers.Spec.BootImage = "deleted"
	spare := catchAll(kubefarmv1.UnknownHold)
	spare.Name, spare.Spec.BootImage = "spare", "also-deleted"
	f.machines.pools = map[string]*kubefarmv1.NodePool{"t1/workers": workers, "t1/spare": spare}
	f.h.cfg.Leases = staticLeases{
		"02:77:00:00:00:01": {Namespace: "t1", Pool: "workers", MAC: "02:77:00:00:00:01", IP: "10.0.0.150"},
		"02:77:00:00:00:02": {Namespace: "t1", Pool: "workers", MAC: "02:77:00:00:00:02", IP: "10.0.0.151"},
		"02:77:00:00:00:03": {Namespace: "t1", Pool: "spare", MAC: "02:77:00:00:00:03", IP: "10.0.0.152"},
	}
	const workersImage = `Warning BootImageMissing discovery boot of 02:77:00:00:00:01 (10.0.0.150, leased from this pool's dynamic range; ` +
		`no Machine claims it) refused: BootImage "deleted" (spec.bootImage) not found; kubefarm-pxe answers the discovery boot ` +
		`of this pool's unknown machines 503 until it exists (kubectl get bootimages)`
	steps := []struct {
		name    string
		mac     string
		advance time.Duration
		want    string // the one event recorded, "" for none
	}{
		{"first discovery boot", "02:77:00:00:00:01", 0, workersImage},
		{"its retry", "02:77:00:00:00:01", 5 * time.Second, ""},
		{"another machine of the pool", "02:77:00:00:00:02", 0, ""},
		{"a machine of another pool", "02:77:00:00:00:03", 0, `Warning BootImageMissing discovery boot of 02:77:00:00:00:03 (10.0.0.152, `},
		{"just under a minute after the first", "02:77:00:00:00:02", poolWarningInterval - 6*time.Second, ""},
		{"a minute after the first", "02:77:00:00:00:02", time.Second, `Warning BootImageMissing discovery boot of 02:77:00:00:00:02 (10.0.0.151, `},
	}
	for _, st := range steps {
		now = now.Add(st.advance)
		if w := f.do("GET", "/boot/"+st.mac+".ipxe", nil); w.Code != 503 {
			t.Fatalf("%s: HTTP %d, want 503", st.name, w.Code)
		}
		got := recorded(fake)
		switch {
		case st.want == "" && len(got) != 0:
			t.Errorf("%s: recorded %q, want nothing", st.name, got)
		case st.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], st.want)):
			t.Errorf("%s: recorded %q, want one event starting %q", st.name, got, st.want)
		}
	}
}

// TestKeyThrottle: one per key per interval, in a table of at most max
// keys that sweeps lapsed keys before it refuses a new one.
func TestKeyThrottle(t *testing.T) {
	now := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	k := newKeyThrottle(time.Minute, 2, func() time.Time { return now })
	for _, st := range []struct {
		advance time.Duration
		key     string
		want    bool
	}{
		{0, "a", true},
		{0, "a", false},
		{10 * time.Second, "b", true},
		{0, "c", false}, // full: a and b are within their interval
		{50 * time.Second, "a", true},
		{0, "c", false}, // a was just stamped again, b is 50 s old
		{10 * time.Second, "c", true},
		{0, "b", false}, // swept for c, and the table is full again
	} {
		now = now.Add(st.advance)
		if got := k.allow(st.key); got != st.want {
			t.Errorf("at %s, allow(%q) = %v, want %v", now.Format("15:04:05"), st.key, got, st.want)
		}
		if len(k.last) > 2 {
			t.Fatalf("table holds %d keys, max 2", len(k.last))
		}
	}
}

package httpboot

// The discovery cap against a real API server: the Discovery counts the
// DiscoveredMachines it watches, and a report that would make one more is
// refused with a DiscoveryCapReached Warning on the pool.

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
	"github.com/kubefarm/kubefarm/pxe/dynamic"
)

// TestDiscoveryCapReachedEvent: with the cap of one DiscoveredMachine
// taken, reports of new MACs are answered 429 and create nothing; the
// first refusal records a Warning on the pool that served the report,
// later ones within a minute only count, and a minute later the next
// refusal warns again.
func TestDiscoveryCapReachedEvent(t *testing.T) {
	env := testenv.StartT(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	existing := &kubefarmv1.DiscoveredMachine{ObjectMeta: metav1.ObjectMeta{Name: kubefarmv1.DiscoveredMachineName("02:77:00:00:00:99")},
		Spec: kubefarmv1.DiscoveredMachineSpec{MAC: "02:77:00:00:00:99", IP: "10.0.0.199", Pool: "t1/workers", LastSeen: metav1.Now()}}
	if err := env.Client.Create(ctx, existing); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	now := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	fake := record.NewFakeRecorder(64)
	d := startCappedDiscovery(t, env, fake, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })

	f := newHandlerFixture(t, testr.New(t))
	f.h.cfg.Discovery = d
	f.machines.pools = map[string]*kubefarmv1.NodePool{"t1/workers": catchAll(kubefarmv1.UnknownHold)}
	leases := staticLeases{}
	for mac, ip := range map[string]string{"02:77:00:00:00:01": "10.0.0.10", "02:77:00:00:00:02": "10.0.0.20", "02:77:00:00:00:03": "10.0.0.30"} {
		leases[mac] = dynamic.Held{Namespace: "t1", Pool: "workers", MAC: mac, IP: ip}
	}
	f.h.cfg.Leases = leases
	steps := []struct {
		name    string
		mac     string
		advance time.Duration
		want    string // the one event recorded, "" for none
	}{
		{"first refusal", "02:77:00:00:00:01", 0,
			"Warning DiscoveryCapReached discovery report of 02:77:00:00:00:01 from 10.0.0.10 refused: 1 DiscoveredMachines exist, the cap (--discovery-max-machines)"},
		{"another MAC within the minute", "02:77:00:00:00:02", 10 * time.Second, ""},
		{"the first again within the minute", "02:77:00:00:00:01", 40 * time.Second, ""},
		{"a minute after the first", "02:77:00:00:00:03", 10 * time.Second,
			"Warning DiscoveryCapReached discovery report of 02:77:00:00:00:03 from 10.0.0.30 refused"},
	}
	for _, st := range steps {
		mu.Lock()
		now = now.Add(st.advance)
		mu.Unlock()
		r := httptest.NewRequest("POST", base+"/discovery", strings.NewReader(string(body(t, with("mac", st.mac)))))
		r.RemoteAddr = leases[st.mac].IP + ":40000"
		w := httptest.NewRecorder()
		f.h.ServeHTTP(w, r)
		if w.Code != 429 || w.Header().Get("Retry-After") == "" {
			t.Fatalf("%s: HTTP %d (Retry-After %q) %s, want 429 with Retry-After", st.name, w.Code, w.Header().Get("Retry-After"), w.Body)
		}
		got := recorded(fake)
		switch {
		case st.want == "" && len(got) != 0:
			t.Errorf("%s: recorded %q, want nothing", st.name, got)
		case st.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], st.want)):
			t.Errorf("%s: recorded %q, want one event starting %q", st.name, got, st.want)
		}
	}
	var list kubefarmv1.DiscoveredMachineList
	if err := env.Client.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Errorf("%d DiscoveredMachines exist, want only the one that took the cap", len(list.Items))
	}
}

// startCappedDiscovery is a Discovery capped at one DiscoveredMachine,
// watching env's through its own cache, once that watch counts the one
// that exists.
func startCappedDiscovery(t *testing.T, env *testenv.Env, fake record.EventRecorder, clock func() time.Time) *Discovery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDiscovery(ctx, c, DiscoveryConfig{Client: env.Client, MaxMachines: 1, Rate: 100, Burst: 100, Events: fake, Now: clock},
		prometheus.NewPedanticRegistry(), testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(cctx) }()
	t.Cleanup(func() { stop(); <-done })
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		return d.known.count() == 1, nil
	}); err != nil {
		t.Fatalf("the watch never counted the existing DiscoveredMachine: %v", err)
	}
	return d
}

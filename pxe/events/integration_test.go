package events_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
	"github.com/kubefarm/kubefarm/pxe/events"
)

// TestEventsReachTheAPI records through client-go's real broadcaster into a
// real API server and finds the events the way `kubectl describe machine`
// does: by the involved object's kind, name, namespace and UID. A throttled
// repeat must not create a second event.
func TestEventsReachTheAPI(t *testing.T) {
	env := testenv.StartT(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "farm"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	m := &kubefarmv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "node-1"},
		Spec: kubefarmv1.MachineSpec{Pool: "p", Cluster: "c", Hostname: "node-1", MACs: []string{"52:54:00:00:00:01"},
			IP: "10.0.0.5", DesiredImage: "img"},
	}
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}

	rec, stop, err := events.StartAPI(env.Config, env.Scheme, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	r := events.New(rec, events.Config{UID: func(ns, name string) (types.UID, bool) {
		var got kubefarmv1.Machine
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &got); err != nil {
			return "", false
		}
		return got.UID, true
	}})
	r.Normal("farm/node-1", events.ReasonOffered, "", "offered 10.0.0.5 to 52:54:00:00:00:01")
	r.Normal("farm/node-1", events.ReasonOffered, "", "offered again") // throttled
	r.Warning("farm/node-1", events.ReasonRefused, "", "refused /config from 10.0.0.9: not the machine's leased IP")

	var list corev1.EventList
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := env.Client.List(ctx, &list, client.InNamespace("farm")); err != nil {
			return false, err
		}
		return len(list.Items) >= 2, nil
	})
	if err != nil {
		t.Fatalf("events did not reach the API: %v (have %d)", err, len(list.Items))
	}
	byReason := map[string]corev1.Event{}
	for _, e := range list.Items {
		if e.InvolvedObject.Kind != "Machine" || e.InvolvedObject.Name != "node-1" || e.InvolvedObject.UID != m.UID {
			t.Errorf("event %s is on %+v, not on the machine (uid %s)", e.Name, e.InvolvedObject, m.UID)
		}
		if e.Source.Component != events.Component || e.Source.Host != "node-a" {
			t.Errorf("event %s has source %+v", e.Name, e.Source)
		}
		byReason[e.Reason] = e
	}
	if e, ok := byReason[events.ReasonOffered]; !ok || e.Type != corev1.EventTypeNormal || e.Count != 1 || e.Message != "offered 10.0.0.5 to 52:54:00:00:00:01" {
		t.Errorf("Offered event = %+v, want one Normal event with the first message", e)
	}
	if e, ok := byReason[events.ReasonRefused]; !ok || e.Type != corev1.EventTypeWarning {
		t.Errorf("Refused event = %+v, want a Warning", e)
	}
	if len(list.Items) != 2 {
		t.Errorf("%d events, want 2 (the repeated offer is throttled)", len(list.Items))
	}
}

// countingRecorder counts the Events the Recorder passes to the
// broadcaster.
type countingRecorder struct {
	record.EventRecorder
	mu sync.Mutex
	n  int
}

func (c *countingRecorder) Event(o runtime.Object, eventType, reason, message string) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	c.EventRecorder.Event(o, eventType, reason, message)
}

// TestStormIsBounded: a storm of 20,000 machines booting at once (two
// stages each, every machine new to the per-machine throttle) writes, with
// the default budget, at most DefaultBurst + DefaultRate x the storm's
// seconds Events into a real API server through client-go's broadcaster;
// every refused one is counted in the metric.
func TestStormIsBounded(t *testing.T) {
	env := testenv.StartT(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "storm"}}); err != nil {
		t.Fatal(err)
	}
	rec, stop, err := events.StartAPI(env.Config, env.Scheme, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	counting := &countingRecorder{EventRecorder: rec}
	r := events.New(counting, events.Config{})
	reg := prometheus.NewRegistry()
	if err := r.Register(reg); err != nil {
		t.Fatal(err)
	}

	const machines = 20_000
	start := time.Now()
	for i := range machines {
		m := fmt.Sprintf("storm/m%05d", i)
		for _, reason := range []string{events.ReasonOffered, events.ReasonAcked} {
			if r.Due(m, reason, "") {
				r.Normal(m, reason, "", "stage of "+m)
			}
		}
	}
	elapsed := time.Since(start)
	counting.mu.Lock()
	written := counting.n
	counting.mu.Unlock()
	bound := events.DefaultBurst + int(events.DefaultRate*elapsed.Seconds()) + 1
	if written > bound || written < events.DefaultBurst {
		t.Errorf("%d Events passed in %v; want the burst %d and at most %d", written, elapsed, events.DefaultBurst, bound)
	}
	var dropped float64
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "kubefarm_pxe_events_dropped_total" {
			for _, m := range mf.GetMetric() {
				dropped += m.GetCounter().GetValue()
			}
		}
	}
	if int(dropped)+written != 2*machines {
		t.Errorf("dropped %v + written %d != %d stages: a refused Event went uncounted", dropped, written, 2*machines)
	}

	// Every Event that passed reaches the API server, and nothing else.
	var list corev1.EventList
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := env.Client.List(ctx, &list, client.InNamespace("storm")); err != nil {
			return false, err
		}
		return len(list.Items) >= written, nil
	})
	if err != nil || len(list.Items) != written {
		t.Fatalf("%d Events in the API server, want the %d that passed: %v", len(list.Items), written, err)
	}
	t.Logf("a storm of %d machines x 2 stages in %v: %d Events written, %v dropped and counted", machines, elapsed.Round(time.Millisecond), written, dropped)
}

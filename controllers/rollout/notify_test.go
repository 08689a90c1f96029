package rollout_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/fetchguard"
	"github.com/kubefarm/kubefarm/internal/notify"
)

// chatReceiver is a real webhook receiver on loopback that records the
// events and texts it was posted, in order; with hang set it never answers.
type chatReceiver struct {
	*httptest.Server
	mu   sync.Mutex
	got  []string // "Event machine: text"
	hang chan struct{}
}

func newChatReceiver(t *testing.T, hang bool) *chatReceiver {
	c := &chatReceiver{}
	if hang {
		c.hang = make(chan struct{})
	}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.hang != nil {
			select {
			case <-c.hang:
			case <-r.Context().Done():
			}
			return
		}
		var b struct{ Text, Event, Machine string }
		raw, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(raw, &b); err != nil {
			t.Errorf("the receiver got %q: %v", raw, err)
		}
		c.mu.Lock()
		c.got = append(c.got, b.Event+" "+b.Machine+": "+b.Text)
		c.mu.Unlock()
	}))
	t.Cleanup(func() {
		if c.hang != nil {
			close(c.hang)
		}
		c.Close()
	})
	return c
}

func (c *chatReceiver) messages() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

// withNotifier gives the rollout a Notifier that may post to loopback.
func withNotifier(t *testing.T, timeout time.Duration) (fixtureOption, *notify.Notifier) {
	n, err := notify.New(notify.Options{Timeout: timeout, Queue: 8,
		Guard: fetchguard.New(fetchguard.Options{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})})
	if err != nil {
		t.Fatal(err)
	}
	return func(f *fixture) { f.notifier = n }, n
}

// notifySecret creates the URL Secret in the fixture's namespace.
func (f *fixture) notifySecret(name, url string, labelled bool) {
	f.t.Helper()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}, Data: map[string][]byte{"url": []byte(url)}}
	if labelled {
		sec.Labels = map[string]string{v1alpha1.LabelNotifyURL: "true"}
	}
	if err := env.Client.Create(context.Background(), sec); err != nil {
		f.t.Fatal(err)
	}
}

// TestRolloutNotifications: a pool with spec.rollout.notify posts, in
// order, DrainStarting and RebootVerified for each machine it updates, then
// RolloutHalted when a machine that never returns spends the failure
// budget; the text follows the pool's template.
func TestRolloutNotifications(t *testing.T) {
	rcv := newChatReceiver(t, false)
	opt, n := withNotifier(t, 5*time.Second)
	f := newFixture(t, 3, v1alpha1.RolloutStrategy{MaxUnavailable: ptr.To(intstr.FromInt32(1)), MinReadySeconds: ptr.To[int32](1),
		BootTimeout: &metav1.Duration{Duration: 3 * time.Second}, FailureBudget: ptr.To[int32](0),
		Notify: &v1alpha1.RolloutNotify{URLSecret: "chat", Template: `{{.Event}} on {{.Node}} ({{.Pool}}){{if .Detail}}: {{.Detail}}{{end}}`}}, opt)
	f.notifySecret("chat", rcv.URL+"/hooks/T000/B000/token", true)
	f.farm.set("workers-m02", func(m *fakeMachine) { m.neverReturn = true })
	f.patchPool(func(p *v1alpha1.NodePool) { p.Spec.BootImage = f.imgB.Name })
	f.eventually("the pool halts and the halt is posted", func() (bool, error) {
		msgs := rcv.messages()
		return len(msgs) > 0 && strings.HasPrefix(msgs[len(msgs)-1], "RolloutHalted"), nil
	})
	want := []string{"DrainStarting workers-m00: DrainStarting on m00 (workers)", "RebootVerified workers-m00: RebootVerified on m00 (workers): boot ",
		"DrainStarting workers-m01: DrainStarting on m01 (workers)", "RebootVerified workers-m01: RebootVerified on m01 (workers): boot ",
		"DrainStarting workers-m02: DrainStarting on m02 (workers)", "RolloutHalted : RolloutHalted on  (workers): 1 failed updates exceed the failure budget 0"}
	got := rcv.messages()
	if len(got) != len(want) {
		t.Fatalf("the receiver got %d notifications, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("notification %d = %q, want it to start %q", i, got[i], want[i])
		}
	}
	if sent := testutil.ToFloat64(n.Counter().WithLabelValues(notify.ResultSent)); sent != float64(len(want)) {
		t.Errorf("sent = %v, want %d", sent, len(want))
	}
}

// TestRolloutNotificationsNeverBlock: a receiver that never answers costs
// the rollout nothing (it completes; the failures are counted), and a
// Secret without the consent label is a NotificationFailed event naming
// the label, never a post.
func TestRolloutNotificationsNeverBlock(t *testing.T) {
	rcv := newChatReceiver(t, true)
	opt, n := withNotifier(t, 500*time.Millisecond)
	f := newFixture(t, 2, v1alpha1.RolloutStrategy{MaxUnavailable: ptr.To(intstr.FromInt32(1)), MinReadySeconds: ptr.To[int32](1),
		BootTimeout: &metav1.Duration{Duration: time.Minute}, Notify: &v1alpha1.RolloutNotify{URLSecret: "chat"}}, opt)
	f.notifySecret("chat", rcv.URL, true)
	f.patchPool(func(p *v1alpha1.NodePool) { p.Spec.BootImage = f.imgB.Name })
	f.eventually("the rollout completes beside a hung receiver", func() (bool, error) { return f.complete(f.imgB), nil })
	f.eventually("the four posts failed", func() (bool, error) {
		return testutil.ToFloat64(n.Counter().WithLabelValues(notify.ResultFailed))+testutil.ToFloat64(n.Counter().WithLabelValues(notify.ResultDropped)) == 4, nil
	})

	f.notifySecret("unlabelled", rcv.URL, false)
	f.patchPool(func(p *v1alpha1.NodePool) {
		p.Spec.Rollout.Notify.URLSecret = "unlabelled"
		p.Spec.BootImage = f.imgA.Name
	})
	ev := f.waitEvent(f.pool.Name, "NotificationFailed")
	if !strings.Contains(ev.Note, v1alpha1.LabelNotifyURL+"=true") || strings.Contains(ev.Note, rcv.URL) {
		t.Errorf("NotificationFailed says %q: want the label named and no URL", ev.Note)
	}
	f.eventually("the second rollout completes", func() (bool, error) { return f.complete(f.imgA), nil })
}

package notify

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefarm/kubefarm/internal/fetchguard"
)

var sample = Message{Event: EventDrainStarting, Namespace: "farm", Pool: "workers", Machine: "workers-m01", Node: "m01",
	Image: "node-2026-12", Time: time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)}

func TestRender(t *testing.T) {
	for _, tc := range []struct {
		name, tmpl, want, err string
	}{
		{name: "default", want: "kubefarm DrainStarting: farm/workers machine workers-m01 (node m01), image node-2026-12"},
		{name: "custom", tmpl: `{{.Event}} {{.Machine}} at {{.Time.Format "15:04"}}`, want: "DrainStarting workers-m01 at 03:00"},
		{name: "an unknown field is an error", tmpl: `{{.Secret}}`, err: "Secret"},
		{name: "a parse error", tmpl: `{{.Event`, err: "unclosed action"},
		{name: "too long a template", tmpl: strings.Repeat("x", MaxTemplate+1), err: "at most 4096"},
		{name: "long text is cut", tmpl: `{{.Machine}} {{.Detail}}{{.Detail}}`, want: "workers-m01 " + strings.Repeat("x", MaxText-12)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := sample
			m.Detail = strings.Repeat("x", 3000)
			if tc.name == "default" {
				m.Detail = ""
			}
			got, err := Render(tc.tmpl, m)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one mentioning %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %q (%d bytes)\nwant %q", got, len(got), tc.want)
			}
		})
	}
}

func TestCheckURL(t *testing.T) {
	for raw, ok := range map[string]bool{
		"https://hooks.example.com/services/T000/B000/XXXX": true,
		"http://receiver.farm.svc:8080/hook":                true,
		" https://hooks.example.com/x ":                     true,
		"slack://token@channel":                             false,
		"https://user:pass@hooks.example.com/x":             false,
		"https:///nohost":                                   false,
		"ftp://example.com/x":                               false,
		"::":                                                false,
	} {
		err := CheckURL(raw)
		if (err == nil) != ok {
			t.Errorf("CheckURL(%q) = %v, want ok %t", raw, err, ok)
		}
		if err != nil && strings.Contains(err.Error(), "pass") && strings.Contains(raw, "pass@") {
			t.Errorf("CheckURL quotes the credential: %v", err)
		}
	}
}

// receiver is a real HTTP server on loopback recording what it got.
type receiver struct {
	*httptest.Server
	mu    sync.Mutex
	got   []body
	block chan struct{} // when set, every request waits for it to close
}

func newReceiver(t *testing.T, block chan struct{}) *receiver {
	r := &receiver{block: block}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.block != nil {
			select {
			case <-r.block:
			case <-req.Context().Done():
				return
			}
		}
		var b body
		raw, _ := io.ReadAll(req.Body)
		if err := json.Unmarshal(raw, &b); err != nil || req.Header.Get("Content-Type") != "application/json" {
			t.Errorf("the receiver got %q (%s): %v", raw, req.Header.Get("Content-Type"), err)
		}
		r.mu.Lock()
		r.got = append(r.got, b)
		r.mu.Unlock()
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) bodies() []body {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]body(nil), r.got...)
}

// loopbackNotifier may post to loopback only (tests send nowhere else).
func loopbackNotifier(t *testing.T, o Options) *Notifier {
	t.Helper()
	o.Guard = fetchguard.New(fetchguard.Options{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	return running(t, o)
}

// running is a Notifier of o whose sender runs until t ends.
func running(t *testing.T, o Options) *Notifier {
	t.Helper()
	n, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return n
}

func waitCount(t *testing.T, n *Notifier, result string, want float64) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(n.Counter().WithLabelValues(result)) >= want, nil
	})
	if err != nil {
		t.Fatalf("%s stayed at %v, want %v", result, testutil.ToFloat64(n.Counter().WithLabelValues(result)), want)
	}
}

func TestSendsInOrder(t *testing.T) {
	r := newReceiver(t, nil)
	n := loopbackNotifier(t, Options{})
	events := []string{EventDrainStarting, EventRebootVerified, EventDrainStarting, EventRebootVerified, EventRolloutHalted}
	for i, ev := range events {
		m := sample
		m.Event, m.Machine = ev, "workers-m0"+string(rune('0'+i))
		if err := n.Send(r.URL+"/hook", "", m); err != nil {
			t.Fatal(err)
		}
	}
	waitCount(t, n, ResultSent, float64(len(events)))
	got := r.bodies()
	for i, b := range got {
		if b.Event != events[i] || b.Machine != "workers-m0"+string(rune('0'+i)) || !strings.HasPrefix(b.Text, "kubefarm "+events[i]) {
			t.Errorf("notification %d: %+v, want %s for workers-m0%d", i, b, events[i], i)
		}
	}
	if b := got[0]; b.Namespace != "farm" || b.Pool != "workers" || b.Node != "m01" || b.Image != "node-2026-12" || !b.Time.Equal(sample.Time) {
		t.Errorf("the facts beside the text: %+v", b)
	}
}

// TestDeadReceiverDoesNotBlock: a receiver that never answers costs each
// post its timeout, Send never waits, and what the queue cannot hold is
// dropped and counted.
func TestDeadReceiverDoesNotBlock(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	r := newReceiver(t, block)
	n := loopbackNotifier(t, Options{Queue: 2, Timeout: 200 * time.Millisecond, Backoff: 10 * time.Millisecond})
	sent := 0
	dropped := 0
	start := time.Now()
	for range 10 {
		if err := n.Send(r.URL, "", sample); err != nil {
			if !strings.Contains(err.Error(), "queue is full") {
				t.Fatal(err)
			}
			dropped++
			continue
		}
		sent++
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("ten Sends to a dead receiver took %v", took)
	}
	if dropped == 0 {
		t.Errorf("a queue of 2 took 10 notifications while its receiver hung")
	}
	waitCount(t, n, ResultDropped, float64(dropped))
	waitCount(t, n, ResultFailed, float64(sent))
	if got := testutil.ToFloat64(n.Counter().WithLabelValues(ResultSent)); got != 0 {
		t.Errorf("sent = %v to a receiver that never answered", got)
	}
	// Each timed-out notification was posted three times.
	if got := testutil.ToFloat64(n.Retries()); got != float64(2*sent) {
		t.Errorf("retries = %v, want 2 for each of the %d notifications", got, sent)
	}
}

// statusReceiver answers each post with the next of codes (the last one
// from then on) and counts the posts.
func statusReceiver(t *testing.T, codes ...int) (*httptest.Server, func() int) {
	var mu sync.Mutex
	posts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		code := codes[min(posts, len(codes)-1)]
		posts++
		mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(srv.Close)
	return srv, func() int { mu.Lock(); defer mu.Unlock(); return posts }
}

// TestRetries: what may pass is posted again after a backoff, at most
// twice; what will not (a 4xx, a refused address) is posted once.
func TestRetries(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		codes                  []int
		attempts               int
		result                 string
		wantPosts, wantRetries int
	}{
		{name: "503 then 200 is sent on the second post", codes: []int{503, 200}, result: ResultSent, wantPosts: 2, wantRetries: 1},
		{name: "429, 502, then 204 is sent on the third", codes: []int{429, 502, 204}, result: ResultSent, wantPosts: 3, wantRetries: 2},
		{name: "500 for ever fails after three posts", codes: []int{500}, result: ResultFailed, wantPosts: 3, wantRetries: 2},
		{name: "400 fails at once", codes: []int{400, 200}, result: ResultFailed, wantPosts: 1},
		{name: "404 fails at once", codes: []int{404, 200}, result: ResultFailed, wantPosts: 1},
		{name: "Attempts 1 posts once", codes: []int{503, 200}, attempts: 1, result: ResultFailed, wantPosts: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, posts := statusReceiver(t, tc.codes...)
			n := loopbackNotifier(t, Options{Attempts: tc.attempts, Backoff: 5 * time.Millisecond})
			if err := n.Send(srv.URL, "", sample); err != nil {
				t.Fatal(err)
			}
			waitCount(t, n, tc.result, 1)
			if got := posts(); got != tc.wantPosts {
				t.Errorf("%d posts, want %d", got, tc.wantPosts)
			}
			if got := testutil.ToFloat64(n.Retries()); got != float64(tc.wantRetries) {
				t.Errorf("retries = %v, want %d", got, tc.wantRetries)
			}
		})
	}
	t.Run("a refused address is not retried", func(t *testing.T) {
		srv, posts := statusReceiver(t, 200)
		n := running(t, Options{Backoff: 5 * time.Millisecond}) // the default guard refuses loopback
		if err := n.Send(srv.URL, "", sample); err != nil {
			t.Fatal(err)
		}
		waitCount(t, n, ResultFailed, 1)
		if posts() != 0 || testutil.ToFloat64(n.Retries()) != 0 {
			t.Errorf("%d posts, %v retries to a refused address", posts(), testutil.ToFloat64(n.Retries()))
		}
	})
}

// TestGuardRefuses: with the default guard, a post to loopback (as to
// the metadata service or the API server) is refused before connecting.
func TestGuardRefuses(t *testing.T) {
	r := newReceiver(t, nil)
	n := running(t, Options{})
	if err := n.Send(r.URL, "", sample); err != nil {
		t.Fatal(err)
	}
	waitCount(t, n, ResultFailed, 1)
	if got := r.bodies(); len(got) != 0 {
		t.Errorf("the guard let a post through to loopback: %+v", got)
	}
	if err := n.Send("slack://token@channel", "", sample); err == nil {
		t.Error("a shoutrrr URL was queued")
	}
	if err := n.Send(r.URL, "{{.Nope}}", sample); err == nil || !strings.Contains(err.Error(), "Nope") {
		t.Errorf("a bad template: %v", err)
	}
	if got := testutil.ToFloat64(n.Counter().WithLabelValues(ResultInvalid)); got != 2 {
		t.Errorf("invalid = %v, want 2", got)
	}
}

func TestFailureKindHidesTheURL(t *testing.T) {
	n := loopbackNotifier(t, Options{Timeout: time.Second})
	// A closed loopback port: connection refused.
	err := n.post(context.Background(), job{url: "http://127.0.0.1:1/secret-token-path", body: []byte("{}")})
	if err == nil || strings.Contains(err.Error(), "secret-token-path") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("post error %v: want connection refused, without the URL's path", err)
	}
}

package pxeclient

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/kubefarm/kubefarm/pxe/bootpaths"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
	"github.com/kubefarm/kubefarm/pxe/bootsecret"
	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

const mac = "02:00:00:00:00:01"
const token = "abcdef.0123456789abcdef"

// server answers the codes in order, then the last one for ever.
// Every request must carry the client's boot secret: one without it is
// answered 418, which no test expects.
func server(t *testing.T, codes []int, body string) (*Client, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	secret, err := bootsecret.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s, ok := bootsecret.FromRequest(r); !ok || s != secret {
			http.Error(w, "no boot secret", http.StatusTeapot)
			return
		}
		i := int(n.Add(1)) - 1
		code := codes[min(i, len(codes)-1)]
		if code != 200 {
			http.Error(w, "nope", code)
			return
		}
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	var slept []time.Duration
	c := &Client{Base: bootpaths.Base(srv.URL), Secret: secret, Attempts: 5, Log: testr.New(t),
		sleep: func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil }}
	return c, &n
}

func TestFetchConfig(t *testing.T) {
	good, _ := json.Marshal(nodeconfig.NodeConfig{Hostname: "node-1", JoinToken: token})
	for _, tc := range []struct {
		name     string
		codes    []int
		body     string
		attempts int32
		err      string
	}{
		{"first time", []int{200}, string(good), 1, ""},
		{"503 while the tenant credential is missing, then served", []int{503, 503, 200}, string(good), 3, ""},
		{"403 is final", []int{403}, string(good), 1, "HTTP 403"},
		{"503 until the attempts run out", []int{503}, string(good), 5, "HTTP 503"},
		{"garbage is final", []int{200}, `{"joinToken":"` + token + `",`, 1, "not JSON"},
		{"oversized", []int{200}, `{"hostname":"` + strings.Repeat("x", MaxConfig) + `"}`, 1, "over"},
	} {
		c, n := server(t, tc.codes, tc.body)
		nc, err := c.FetchConfig(context.Background(), mac)
		if got := n.Load(); got != tc.attempts {
			t.Errorf("%s: %d attempts, want %d", tc.name, got, tc.attempts)
		}
		if tc.err == "" {
			if err != nil || nc.Hostname != "node-1" || nc.JoinToken != token {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: err %v, want one with %q", tc.name, err, tc.err)
		}
		if err != nil && strings.Contains(err.Error(), "0123456789abcdef") {
			t.Errorf("%s: the error quotes the join token: %v", tc.name, err)
		}
	}
}

func TestFetchConfigContext(t *testing.T) {
	c, _ := server(t, []int{503}, "")
	c.sleep = sleepCtx
	c.Attempts = 1000
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.FetchConfig(ctx, mac); err == nil {
		t.Fatal("no error after the context ended")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("returned after %s", d)
	}
}

func TestReport(t *testing.T) {
	var got bootproto.BootReport
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			http.Error(w, "cannot record boot", http.StatusServiceUnavailable)
			return
		}
		if r.Method != http.MethodPost || r.URL.Path != "/report" {
			http.Error(w, "bad", 400)
			return
		}
		_ = json.NewDecoder(r.Body).Decode(&got)
		w.WriteHeader(204)
	}))
	defer srv.Close()
	c := &Client{Base: bootpaths.Base(srv.URL), Log: testr.New(t), sleep: func(context.Context, time.Duration) error { return nil }}
	rep := bootproto.BootReport{MAC: mac, BootID: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", ImageDigest: "sha256:x",
		Network: &bootproto.NetworkVerdict{Verified: true, Reason: "ok"}}
	if err := c.Report(context.Background(), rep); err != nil {
		t.Fatal(err)
	}
	if n.Load() != 2 || got.Network == nil || !got.Network.Verified || got.BootID != rep.BootID {
		t.Errorf("%d requests, got %+v", n.Load(), got)
	}
}

func TestHeartbeat(t *testing.T) {
	const bootID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	for _, tc := range []struct {
		name     string
		codes    []int
		body     string
		attempts int32
		reboot   bool
		err      string
	}{
		{"stay", []int{200}, `{"reboot":false}`, 1, false, ""},
		{"reboot", []int{200}, `{"reboot":true}`, 1, true, ""},
		{"a newer server's field", []int{200}, `{"reboot":true,"after":"5s"}`, 1, true, ""},
		{"503 while the write fails, then answered", []int{503, 200}, `{"reboot":true}`, 2, true, ""},
		{"403 is final", []int{403}, "", 1, false, "HTTP 403"},
		{"204 is no answer", []int{204}, "", 1, false, "HTTP 204"},
		{"garbage is final", []int{200}, `{"reboot":`, 1, false, "does not decode"},
		{"oversized", []int{200}, `{"reboot":false,"x":"` + strings.Repeat("x", maxReply) + `"}`, 1, false, "over"},
	} {
		var got bootproto.Heartbeat
		var n atomic.Int32
		secret, _ := bootsecret.Generate(nil)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			code := tc.codes[min(int(n.Add(1))-1, len(tc.codes)-1)]
			if s, ok := bootsecret.FromRequest(r); !ok || s != secret || r.Method != http.MethodPost || r.URL.Path != "/heartbeat" || r.Header.Get("Content-Type") != "application/json" {
				http.Error(w, "bad", 400)
				return
			}
			_ = json.NewDecoder(r.Body).Decode(&got)
			if code != 200 {
				http.Error(w, "nope", code)
				return
			}
			_, _ = w.Write([]byte(tc.body))
		}))
		c := &Client{Base: bootpaths.Base(srv.URL), Secret: secret, Attempts: 5, Log: testr.New(t), sleep: func(context.Context, time.Duration) error { return nil }}
		hb := bootproto.Heartbeat{MAC: mac, BootID: bootID, RebootRequired: &bootproto.RebootSignal{Reason: "RebootRequiredFile", Message: "m"}}
		reply, err := c.Heartbeat(context.Background(), hb)
		srv.Close()
		if n.Load() != tc.attempts {
			t.Errorf("%s: %d attempts, want %d", tc.name, n.Load(), tc.attempts)
		}
		if got.MAC != mac || got.BootID != bootID || got.RebootRequired == nil || got.RebootRequired.Reason != "RebootRequiredFile" {
			t.Errorf("%s: sent %+v", tc.name, got)
		}
		if tc.err == "" {
			if err != nil || reply.Reboot != tc.reboot {
				t.Errorf("%s: %+v, %v; want reboot %v", tc.name, reply, err, tc.reboot)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) || reply.Reboot {
			t.Errorf("%s: %+v, %v; want an error with %q", tc.name, reply, err, tc.err)
		}
	}
}

func TestDiscover(t *testing.T) {
	var got []bootproto.DiscoveryReport
	var auth []string
	answers := []func(w http.ResponseWriter){
		func(w http.ResponseWriter) { _, _ = w.Write([]byte(`{"enrolled":false,"reportAfterSeconds":60}`)) },
		func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"enrolled":false,"reportAfterSeconds":60}`))
		},
		func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "999999")
			w.WriteHeader(http.StatusTooManyRequests)
		},
		func(w http.ResponseWriter) { _, _ = w.Write([]byte(`{"enrolled":true,"reportAfterSeconds":60}`)) },
		func(w http.ResponseWriter) { _, _ = w.Write([]byte(`{"enrolled":`)) },
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != bootproto.DiscoveryPath {
			http.Error(w, "wrong route", http.StatusTeapot)
			return
		}
		auth = append(auth, r.Header.Get("Authorization"))
		var rep bootproto.DiscoveryReport
		if err := json.NewDecoder(r.Body).Decode(&rep); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got = append(got, rep)
		answers[len(got)-1](w)
	}))
	t.Cleanup(srv.Close)
	c := &Client{Base: bootpaths.Base(srv.URL), Log: testr.New(t)}
	rep := bootproto.DiscoveryReport{MAC: mac}
	rep.Hardware.MemoryBytes = 1 << 30

	a, err := c.Discover(context.Background(), rep)
	if err != nil || a.Enrolled || a.ReportAfterSeconds != 60 {
		t.Errorf("first: %+v, %v", a, err)
	}
	var se *StatusError
	if _, err := c.Discover(context.Background(), rep); !errors.As(err, &se) || se.Code != 429 || se.RetryAfter != 7*time.Second {
		t.Errorf("429: %v (%+v)", err, se)
	}
	if _, err := c.Discover(context.Background(), rep); !errors.As(err, &se) || se.RetryAfter != maxRetryAfter {
		t.Errorf("429 asking for days: %v (%+v)", err, se)
	}
	if a, err := c.Discover(context.Background(), rep); err != nil || !a.Enrolled {
		t.Errorf("enrolled: %+v, %v", a, err)
	}
	if _, err := c.Discover(context.Background(), rep); err == nil || !strings.Contains(err.Error(), "does not decode") {
		t.Errorf("garbage answer: %v", err)
	}
	for i, h := range auth {
		if h != "" {
			t.Errorf("request %d carried Authorization %q: a discovery boot has no secret", i, h)
		}
	}
	if len(got) != 5 || got[0].MAC != mac || got[0].Hardware.MemoryBytes != 1<<30 {
		t.Errorf("server got %+v", got)
	}

	// Over the bound, nothing is sent.
	big := rep
	big.Hardware.System.Vendor = strings.Repeat("v", bootproto.MaxDiscoveryReport)
	if _, err := c.Discover(context.Background(), big); err == nil || !strings.Contains(err.Error(), "over") {
		t.Errorf("oversized report: %v", err)
	}
	if len(got) != 5 {
		t.Errorf("the oversized report was sent")
	}
}

package redfish

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kubefarm/kubefarm/power"
)

func TestRetryable(t *testing.T) {
	resp := func(code int) *http.Response { return &http.Response{StatusCode: code} }
	for _, tc := range []struct {
		method string
		resp   *http.Response
		err    error
		want   bool
	}{
		{"GET", nil, fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{"POST", nil, fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{"GET", nil, context.DeadlineExceeded, false},
		{"GET", nil, errors.New("x509: certificate signed by unknown authority"), false},
		{"GET", resp(500), nil, true},
		{"POST", resp(500), nil, false},
		{"PATCH", resp(503), nil, true},
		{"POST", resp(502), nil, true},
		{"GET", resp(504), nil, true},
		{"GET", resp(401), nil, false},
		{"POST", resp(400), nil, false},
		{"GET", resp(200), nil, false},
	} {
		if got := retryable(tc.method, tc.resp, tc.err); got != tc.want {
			t.Errorf("retryable(%s, %v, %v) = %v, want %v", tc.method, tc.resp, tc.err, got, tc.want)
		}
	}
}

// TestRetrierBoundsRetriesAndResendsTheBody: a service that answers 503
// is asked three times in all, each time with the whole body, and a
// 200 on the second try ends the retries.
func TestRetrierBoundsRetriesAndResendsTheBody(t *testing.T) {
	var calls atomic.Int32
	var okAfter atomic.Int32
	okAfter.Store(100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if b, _ := io.ReadAll(r.Body); string(b) != `{"ResetType":"On"}` {
			t.Errorf("attempt %d body %q", n, b)
		}
		if n >= okAfter.Load() {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	client, err := httpClient(power.Target{}, 5*time.Second, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	post := func() int {
		resp, err := client.Post(srv.URL, "application/json", bytes.NewReader([]byte(`{"ResetType":"On"}`)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(); code != 503 || calls.Load() != 1+maxRetries {
		t.Errorf("always 503: status %d after %d requests, want 503 after %d", code, calls.Load(), 1+maxRetries)
	}
	calls.Store(0)
	okAfter.Store(2)
	if code := post(); code != 204 || calls.Load() != 2 {
		t.Errorf("503 then 204: status %d after %d requests, want 204 after 2", code, calls.Load())
	}
}

func TestHTTPClientRejectsACAWithoutCertificates(t *testing.T) {
	_, err := httpClient(power.Target{CA: []byte("not PEM")}, time.Second, 0)
	if err == nil || !strings.Contains(err.Error(), "spec.power.caSecret") {
		t.Errorf("err = %v, want one naming spec.power.caSecret", err)
	}
}

// TestServiceRootThatIsNotRedfish: an address that answers with a web
// page, not the Redfish service root, says so.
func TestServiceRootThatIsNotRedfish(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/redfish/v1/" {
			t.Errorf("asked for %s, want the service root", r.URL.Path)
		}
		_, _ = w.Write([]byte("<html>login</html>"))
	}))
	defer srv.Close()
	client, err := httpClient(power.Target{}, 5*time.Second, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sessionsLink(context.Background(), client, srv.URL)
	if !errors.Is(err, errNotRedfish) {
		t.Errorf("err = %v, want errNotRedfish", err)
	}
}

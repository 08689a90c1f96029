package httpboot

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/fetchguard"
	"github.com/kubefarm/kubefarm/internal/testing/accepts"
)

// TestStoreRefusesDeniedAddresses: a store with the default guard refuses
// a URL and an OCI repository on 127.0.0.1 with a loopback refusal, and
// neither server sees a connection; a remote.WithTransport among the
// store's options does not get around it.
func TestStoreRefusesDeniedAddresses(t *testing.T) {
	srv := accepts.NewServer(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "kernel") }))
	s := newStore(t, StoreConfig{
		Guard:         fetchguard.New(fetchguard.Options{}),
		NameOptions:   []name.Option{name.Insecure},
		RemoteOptions: []remote.Option{remote.WithTransport(http.DefaultTransport)},
	})
	d := sha([]byte("kernel"))
	for _, tc := range []struct {
		name string
		a    kubefarmv1.Artifact
		repo string
	}{
		{"url", kubefarmv1.Artifact{Digest: d, URL: srv.URL + "/kernel"}, ""},
		{"registry", kubefarmv1.Artifact{Digest: d}, strings.TrimPrefix(srv.URL, "http://") + "/kubefarm/node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Ensure(context.Background(), tc.a, tc.repo)
			var r *fetchguard.RefusedError
			if !errors.As(err, &r) || r.Rule.Class != fetchguard.ClassLoopback {
				t.Fatalf("err = %v, want a loopback refusal", err)
			}
			if !strings.Contains(err.Error(), "127.0.0.1 is a loopback address") {
				t.Errorf("err = %v does not name the address and its class", err)
			}
			if n := srv.Accepted(t); n != 0 {
				t.Fatalf("the server accepted %d connections", n)
			}
			if s.Has(d) {
				t.Fatal("refused artifact cached")
			}
		})
	}
}

// TestStoreErrorsDoNotEchoTheSource: what a source says (a status line's
// text, a body, a registry's error document, a redirect's URL) is not in
// Ensure's error; the status code is.
func TestStoreErrorsDoNotEchoTheSource(t *testing.T) {
	const secret = "SECRET-7f3a"
	srv := accepts.NewServer(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/status-text":
			// A status line whose text is the server's: "418 SECRET...".
			c, buf, _ := http.NewResponseController(w).Hijack()
			_, _ = buf.WriteString("HTTP/1.1 418 " + secret + "\r\nContent-Length: 6\r\nConnection: close\r\n\r\n" + secret[:6])
			_ = buf.Flush()
			c.Close()
		case r.URL.Path == "/body":
			http.Error(w, secret, http.StatusForbidden)
		case r.URL.Path == "/redirect":
			http.Redirect(w, r, "/gone?token="+secret, http.StatusFound)
		case r.URL.Path == "/v2/":
		case strings.Contains(r.URL.Path, "/blobs/"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"errors":[{"code":"DENIED","message":"`+secret+`"}]}`)
		default:
			http.Error(w, secret, http.StatusNotFound)
		}
	}))
	s := newStore(t, StoreConfig{NameOptions: []name.Option{name.Insecure}})
	d := sha([]byte("k"))
	for _, tc := range []struct {
		name, path, repo string
		code             int
	}{
		{"status text", "/status-text", "", 418},
		{"body", "/body", "", http.StatusForbidden},
		{"redirect", "/redirect", "", http.StatusNotFound},
		{"registry error", "", strings.TrimPrefix(srv.URL, "http://") + "/kubefarm/node", http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := kubefarmv1.Artifact{Digest: d}
			if tc.path != "" {
				a.URL = srv.URL + tc.path
			}
			err := s.Ensure(context.Background(), a, tc.repo)
			var se *StatusError
			if !errors.As(err, &se) || se.Code != tc.code {
				t.Fatalf("err = %v, want a StatusError %d", err, tc.code)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), secret[:6]) {
				t.Fatalf("err = %q echoes what the source sent", err)
			}
		})
	}
	// Sanity: the guard let every request through (loopback is allowed
	// here), so the errors above are the sources' answers.
	if n := srv.Accepted(t); n == 0 {
		t.Fatal("the server saw no connection")
	}
}

// TestStoreGuardDefault: a StoreConfig without a Guard gets the default
// one, which refuses loopback.
func TestStoreGuardDefault(t *testing.T) {
	s, err := NewStore(StoreConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.cfg.Guard.Check(netip.MustParseAddr("127.0.0.1")); err == nil {
		t.Fatal("the default guard allows loopback")
	}
}

// Package promtest runs a real Prometheus server for tests, built from its
// Go module at the version pinned in hack/tools/prometheus (`make
// envtest-tools`), with rules the test gives and one scrape target the
// test serves: a gauge the test sets, so an alert fires and clears when
// the test says. It is imported by tests only.
package promtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"golang.org/x/crypto/bcrypt"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefarm/kubefarm/internal/testing/etcdtest"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// Gauge is the metric the target serves: kubefarm_test_alarm.
const Gauge = "kubefarm_test_alarm"

// Server is one running Prometheus and its target.
type Server struct {
	// URL is http://127.0.0.1:<port> (https with Options.TLS), the API's
	// base.
	URL string
	// CA is the PEM file of the CA that signed the server's certificate
	// (Options.TLS only).
	CA    string
	alarm atomic.Int64
	api   promv1.API
	Log   string
}

// Options of StartWith; the zero value is Start's server.
type Options struct {
	// TLS serves https with a certificate for 127.0.0.1 from a throw-away
	// CA (Server.CA).
	TLS bool
	// Username and Password, when set, are required of every request
	// (Prometheus' basic_auth_users, bcrypt).
	Username, Password string
}

// Start runs Prometheus on loopback, scraping the test's target and
// evaluating rules (a rules file's YAML) every second, and waits until
// it is ready; it stops when t ends.
func Start(t testing.TB, rules string) *Server { t.Helper(); return StartWith(t, rules, Options{}) }

// StartWith is Start with Prometheus' web configuration (--web.config.file)
// as o says: https, basic authentication.
func StartWith(t testing.TB, rules string, o Options) *Server {
	t.Helper()
	bin := testenv.PinnedBinary(t, "prometheus")
	s := &Server{}
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# TYPE %s gauge\n%s %d\n", Gauge, Gauge, s.alarm.Load())
	}))
	t.Cleanup(target.Close)
	dir := t.TempDir()
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
- job_name: test
  static_configs:
  - targets: [%q]
`, filepath.Join(dir, "rules.yaml"), target.Listener.Addr().String())
	scheme, client, web := "http", &http.Client{Timeout: 5 * time.Second}, webConfig(t, s, o)
	if o.TLS {
		scheme = "https"
		client.Transport = &http.Transport{TLSClientConfig: clientTLS(t, s.CA)}
	}
	for name, body := range map[string]string{"prometheus.yaml": config, "rules.yaml": rules, "web.yaml": web} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(etcdtest.FreePort(t)))
	s.URL, s.Log = scheme+"://"+addr, filepath.Join(dir, "prometheus.log")
	logf, err := os.Create(s.Log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	args := []string{"--config.file=" + filepath.Join(dir, "prometheus.yaml"), "--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr}
	if web != "" {
		args = append(args, "--web.config.file="+filepath.Join(dir, "web.yaml"))
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	var rt http.RoundTripper = client.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	if o.Username != "" {
		rt = basicAuth{rt, o.Username, o.Password}
		client.Transport = rt
	}
	c, err := api.NewClient(api.Config{Address: s.URL, RoundTripper: rt})
	if err != nil {
		t.Fatal(err)
	}
	s.api = promv1.NewAPI(c)
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case werr := <-exited:
			exited <- werr
			return false, fmt.Errorf("prometheus exited: %v", werr)
		default:
		}
		resp, err := client.Get(s.URL + "/-/ready")
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		log, _ := os.ReadFile(s.Log)
		t.Fatalf("prometheus not ready: %v\n%s", err, log)
	}
	return s
}

// webConfig is Prometheus' web configuration for o; with TLS it sets s.CA.
func webConfig(t testing.TB, s *Server, o Options) string {
	t.Helper()
	var b strings.Builder
	if o.TLS {
		pki := etcdtest.NewPKI(t)
		s.CA = pki.CA
		fmt.Fprintf(&b, "tls_server_config:\n  cert_file: %q\n  key_file: %q\n", pki.ServerCert, pki.ServerKey)
	}
	if o.Username != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(o.Password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "basic_auth_users:\n  %q: %q\n", o.Username, hash)
	}
	return b.String()
}

func clientTLS(t testing.TB, caFile string) *tls.Config {
	t.Helper()
	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// basicAuth authenticates the harness's own requests.
type basicAuth struct {
	next       http.RoundTripper
	user, pass string
}

func (b basicAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.SetBasicAuth(b.user, b.pass)
	return b.next.RoundTrip(r)
}

// SetAlarm sets the gauge the target serves.
func (s *Server) SetAlarm(v int64) { s.alarm.Store(v) }

// AlertState is the state of the named alert as Prometheus reports it now
// ("firing", "pending", or "" when it is inactive).
func (s *Server) AlertState(ctx context.Context, name string) (string, error) {
	res, err := s.api.Alerts(ctx)
	if err != nil {
		return "", err
	}
	for _, a := range res.Alerts {
		if string(a.Labels["alertname"]) == name {
			return string(a.State), nil
		}
	}
	return "", nil
}

// WaitAlert waits until the named alert's state is want ("" inactive).
func (s *Server) WaitAlert(t testing.TB, name, want string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		st, err := s.AlertState(ctx, name)
		last = st
		return err == nil && st == want, nil
	})
	if err != nil {
		t.Fatalf("alert %s stayed %q, want %q", name, last, want)
	}
}

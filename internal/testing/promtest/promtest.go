// Package promtest runs a real Prometheus server for tests, built from its
// Go module at the version pinned in hack/tools/prometheus (`make
// envtest-tools`), with rules the test gives and one scrape target the
// test serves: a gauge the test sets, so an alert fires and clears when
// the test says. It is imported by tests only.
package promtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefarm/kubefarm/internal/testing/etcdtest"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// Gauge is the metric the target serves: kubefarm_test_alarm.
const Gauge = "kubefarm_test_alarm"

// Server is one running Prometheus and its target.
type Server struct {
	// URL is http://127.0.0.1:<port>, the API's base.
	URL   string
	alarm atomic.Int64
	api   promv1.API
	Log   string
}

// Start runs Prometheus on loopback, scraping the test's target and
// evaluating rules (a rules file's YAML) every second, and waits until
// it is ready; it stops when t ends.
func Start(t testing.TB, rules string) *Server {
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
	for name, body := range map[string]string{"prometheus.yaml": config, "rules.yaml": rules} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(etcdtest.FreePort(t)))
	s.URL, s.Log = "http://"+addr, filepath.Join(dir, "prometheus.log")
	logf, err := os.Create(s.Log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yaml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
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
	c, err := api.NewClient(api.Config{Address: s.URL})
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
		resp, err := http.Get(s.URL + "/-/ready")
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

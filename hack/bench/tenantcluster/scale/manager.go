package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// manager is the kubefarm-manager process.
type manager struct {
	cmd     *exec.Cmd
	exited  chan error
	metrics string
	log     string
}

// startManager runs the binary as TestBinary does (webhooks with a
// cert-manager certificate, leader election as the chart runs it), but
// as system:masters: RBAC is evaluated in the API server and costs the
// manager nothing, and its correctness is TestBinary's concern.
func startManager(ctx context.Context, env *testenv.Env, binary, logPath string) (*manager, error) {
	certDir, caPEM, err := env.IssueServingCertificate(ctx, managerNamespace)
	if err != nil {
		return nil, err
	}
	kubeconfig, err := env.WriteKubeconfig(envtest.User{Name: "kubefarm-manager", Groups: []string{"system:masters"}}, env.Dir)
	if err != nil {
		return nil, err
	}
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = testenv.FreePort(); err != nil {
			return nil, err
		}
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	m := &manager{metrics: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), log: logPath, exited: make(chan error, 1)}
	probes := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
	m.cmd = exec.Command(binary,
		"--kubeconfig", kubeconfig,
		"--metrics-bind-address", m.metrics,
		"--health-probe-bind-address", probes,
		"--webhook-host", "127.0.0.1", fmt.Sprintf("--webhook-port=%d", ports[2]), "--webhook-cert-dir", certDir,
		"--leader-elect", "--leader-election-namespace", managerNamespace,
	)
	m.cmd.Stdout, m.cmd.Stderr = logFile, logFile
	// The manager must not outlive the benchmark, whatever ends it.
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", binary, err)
	}
	go func() {
		m.exited <- m.cmd.Wait()
		logFile.Close()
	}()

	// Webhooks only once the manager serves them: they fail closed.
	readyCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		if err := m.running(); err != nil {
			return m, err
		}
		if code, _, err := get(readyCtx, "http://"+probes+"/readyz"); err == nil && code == http.StatusOK {
			break
		}
		select {
		case <-readyCtx.Done():
			m.stop()
			return nil, fmt.Errorf("the manager never became ready (/readyz); see %s", logPath)
		case <-time.After(pollInterval):
		}
	}
	if err := env.InstallWebhooks(ctx, ports[2], caPEM); err != nil {
		m.stop()
		return nil, err
	}
	return m, nil
}

func (m *manager) running() error {
	select {
	case err := <-m.exited:
		m.exited <- err
		return fmt.Errorf("the manager exited (%v); see %s", err, m.log)
	default:
		return nil
	}
}

// stop sends SIGTERM and waits for the graceful shutdown, then kills.
func (m *manager) stop() {
	if m.running() != nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(40 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
}

func (m *manager) scrape(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	if err := m.running(); err != nil {
		return nil, err
	}
	code, body, err := get(ctx, "http://"+m.metrics+"/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/metrics answered %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(strings.NewReader(body))
}

func get(ctx context.Context, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, string(body), err
}

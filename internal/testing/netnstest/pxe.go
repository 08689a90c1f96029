package netnstest

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// BuildPXE builds cmd/kubefarm-pxe into a temporary directory and returns
// the binary's path. Build it before starting an API server: it is the
// heaviest step.
func BuildPXE(ctx context.Context, t testing.TB) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	binary := filepath.Join(t.TempDir(), "kubefarm-pxe")
	build := exec.CommandContext(ctx, "go", "build", "-o", binary, "./cmd/kubefarm-pxe")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build kubefarm-pxe: %v\n%s", err, out)
	}
	return binary
}

// APIKubeconfig writes a system:masters kubeconfig for env whose server is
// https://<hostPort> (where a Forward listener inside a namespace answers;
// it must be a loopback address, which the API server's certificate names).
func APIKubeconfig(t testing.TB, env *testenv.Env, user, hostPort string) string {
	t.Helper()
	kubeconfig, err := env.WriteKubeconfig(envtest.User{Name: user, Groups: []string{"system:masters"}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range kc.Clusters {
		cl.Server = "https://" + hostPort
	}
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// PXE is a kubefarm-pxe process running in a namespace.
type PXE struct {
	Name string
	Cmd  *exec.Cmd
	Log  *LockedBuffer
	// Exited receives the process's exit once; Wait and Kill put it back.
	exited chan error
}

// StartPXE starts binary inside ns with args (`ip netns exec` execs it,
// so the process's PID is the binary's). It is killed when the test ends,
// and its log is printed if the test failed.
func StartPXE(t testing.TB, name, ns, binary string, args ...string) *PXE {
	t.Helper()
	p := &PXE{Name: name, Log: &LockedBuffer{}, exited: make(chan error, 1)}
	p.Cmd = exec.Command("ip", append([]string{"netns", "exec", ns, binary}, args...)...)
	p.Cmd.Stdout, p.Cmd.Stderr = p.Log, p.Log
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.Cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.Kill()
		if t.Failed() {
			t.Logf("kubefarm-pxe %s log:\n%s", name, p.Log.String())
		}
	})
	return p
}

// Exited reports whether the process has exited, and how.
func (p *PXE) Exited() (bool, error) {
	select {
	case err := <-p.exited:
		p.exited <- err
		return true, err
	default:
		return false, nil
	}
}

// Kill sends SIGKILL and waits for the process to be gone; it returns the
// process's exit error.
func (p *PXE) Kill() error {
	if done, err := p.Exited(); done {
		return err
	}
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	err := <-p.exited
	p.exited <- err
	return err
}

// WaitHTTP polls, with HEAD through hc, each of urls until it answers 200,
// failing the test when the process exits or timeout passes first.
func (p *PXE) WaitHTTP(ctx context.Context, t testing.TB, hc *http.Client, timeout time.Duration, urls ...string) {
	t.Helper()
	for _, u := range urls {
		var last string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
			if done, err := p.Exited(); done {
				return false, fmt.Errorf("kubefarm-pxe %s exited: %v", p.Name, err)
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
			if err != nil {
				return false, err
			}
			resp, err := hc.Do(req)
			if err != nil {
				last = err.Error()
				return false, nil
			}
			resp.Body.Close()
			last = resp.Status
			return resp.StatusCode == http.StatusOK, nil
		})
		if err != nil {
			t.Fatalf("kubefarm-pxe %s: %s never answered 200 (last: %s): %v", p.Name, u, last, err)
		}
	}
}

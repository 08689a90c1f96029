// Package testenv starts a real control plane for integration tests: etcd and
// kube-apiserver built from pinned Go modules (see hack/tools), the project's
// CRDs and cert-manager's CRDs installed, and, on request, the real
// cert-manager controllers running against the same API server.
//
// The binaries live in the repository's bin/ folder and are built by
// `make envtest-tools`, which every test target depends on. A missing binary
// is an error that says how to build it, never a skip.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/manager"
)

// Options choose what runs beside the API server.
type Options struct {
	// CertManager starts the cert-manager controllers.
	CertManager bool
	// APIServerFlags are set on kube-apiserver on top of envtest's own
	// (flag name without dashes to value), for tests of features the API
	// server only has when asked, such as enable-bootstrap-token-auth.
	APIServerFlags map[string]string
}

// Env is a running control plane.
type Env struct {
	Config *rest.Config
	Client client.Client
	Scheme *k8sruntime.Scheme
	// Dir holds this environment's files: kubeconfigs and component logs.
	Dir string

	env         *envtest.Environment
	certManager *exec.Cmd
	cmExited    chan error
}

// PinnedBinary is bin/<name>, a pinned upstream binary that `make
// envtest-tools` builds: missing is a test failure that says how to build
// it, never a skip.
func PinnedBinary(t testing.TB, name string) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing from %s: run `make envtest-tools` (make test does it): %v", name, filepath.Dir(bin), err)
	}
	return bin
}

// RepoRoot is the directory of the project's go.mod.
func RepoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the testenv source file")
	}
	dir := filepath.Dir(file)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above " + filepath.Dir(file))
		}
		dir = parent
	}
}

// NewScheme knows the built-in kinds, the project's kinds, cert-manager's and CRDs.
func NewScheme() (*k8sruntime.Scheme, error) {
	s := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, kubefarmv1.AddToScheme, certmanagerv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Start brings up etcd and kube-apiserver, installs the CRDs and, if asked,
// starts cert-manager. Call Stop when done, also after an error.
func Start(opts Options) (*Env, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(root, "bin")
	needed := []string{"kube-apiserver", "etcd"}
	if opts.CertManager {
		needed = append(needed, "cert-manager-controller")
	}
	for _, name := range needed {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			return nil, fmt.Errorf("%s is missing from %s: run `make envtest-tools` (make test does it): %w", name, bin, err)
		}
	}
	cmCRDs, err := certManagerCRDDir(root)
	if err != nil {
		return nil, err
	}
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kubefarm-testenv-")
	if err != nil {
		return nil, err
	}

	e := &Env{Scheme: scheme, Dir: dir}
	e.env = &envtest.Environment{
		Scheme:                scheme,
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases"), cmCRDs},
		ErrorIfCRDPathMissing: true,
		// Two cores shared with compilers: give the API server time.
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	args := e.env.ControlPlane.GetAPIServer().Configure()
	for flag, value := range opts.APIServerFlags {
		args.Set(flag, value)
	}
	e.Config, err = e.env.Start()
	if err != nil {
		return e, fmt.Errorf("starting etcd and kube-apiserver: %w", err)
	}
	e.Client, err = client.New(e.Config, client.Options{Scheme: scheme})
	if err != nil {
		return e, err
	}
	if opts.CertManager {
		if err := e.startCertManager(filepath.Join(bin, "cert-manager-controller")); err != nil {
			return e, err
		}
	}
	return e, nil
}

// certManagerCRDDir finds cert-manager's CRDs in the module cache, at the
// version the project's go.mod pins (the same one hack/tools builds).
func certManagerCRDDir(root string) (string, error) {
	if dir := os.Getenv("KUBEFARM_CERT_MANAGER_CRDS"); dir != "" {
		return dir, nil
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locating the cert-manager module for its CRDs (set KUBEFARM_CERT_MANAGER_CRDS to override): %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds")
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("cert-manager CRDs not found: %w", err)
	}
	return dir, nil
}

func (e *Env) startCertManager(path string) error {
	kubeconfigPath, err := e.WriteKubeconfig(envtest.User{Name: "cert-manager", Groups: []string{"system:masters"}}, e.Dir)
	if err != nil {
		return err
	}
	logPath := filepath.Join(e.Dir, "cert-manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(path, "--kubeconfig", kubeconfigPath, "--cluster-resource-namespace", "cert-manager")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting cert-manager: %w", err)
	}
	e.certManager = cmd
	e.cmExited = make(chan error, 1)
	go func() {
		e.cmExited <- cmd.Wait()
		logFile.Close()
	}()
	return nil
}

// CertManagerLog is the path of the cert-manager controller's log.
func (e *Env) CertManagerLog() string { return filepath.Join(e.Dir, "cert-manager.log") }

// CertManagerRunning reports an error if the cert-manager process has exited.
func (e *Env) CertManagerRunning() error {
	if e.certManager == nil {
		return errors.New("cert-manager was not started")
	}
	select {
	case err := <-e.cmExited:
		e.cmExited <- err
		return fmt.Errorf("cert-manager exited (%v); see %s", err, e.CertManagerLog())
	default:
		return nil
	}
}

// Stop stops cert-manager and the control plane and removes Dir, unless
// KUBEFARM_KEEP_TESTENV is set (then Dir is kept for debugging).
func (e *Env) Stop() error {
	var errs []error
	if e.certManager != nil && e.certManager.Process != nil {
		_ = syscall.Kill(-e.certManager.Process.Pid, syscall.SIGTERM)
		select {
		case <-e.cmExited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-e.certManager.Process.Pid, syscall.SIGKILL)
			<-e.cmExited
		}
	}
	if e.env != nil {
		errs = append(errs, e.env.Stop())
	}
	if os.Getenv("KUBEFARM_KEEP_TESTENV") == "" {
		errs = append(errs, os.RemoveAll(e.Dir))
	}
	return errors.Join(errs...)
}

// AddUser provisions a client certificate identity with the given groups
// (none: only what RBAC grants it) on the test API server.
func (e *Env) AddUser(user envtest.User) (*envtest.AuthenticatedUser, error) {
	return e.env.AddUser(user, nil)
}

// Main is a TestMain body for packages whose tests share one environment: it
// starts the environment into *env, runs the tests, stops it and exits.
func Main(m interface{ Run() int }, opts Options, env **Env) {
	os.Exit(run(m, opts, env, nil))
}

// MainWithManager is Main with kubefarm-manager running in-process beside
// the tests, as it ships (StartManager, webhooks installed), for the
// packages that test a controller through its real wiring.
func MainWithManager(m interface{ Run() int }, opts Options, mgrOpts manager.Options, env **Env) {
	os.Exit(run(m, opts, env, &mgrOpts))
}

func run(m interface{ Run() int }, opts Options, env **Env, mgrOpts *manager.Options) int {
	var err error
	*env, err = Start(opts)
	if *env != nil {
		defer func() {
			if err := (*env).Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "stopping the integration environment:", err)
			}
		}()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration environment:", err)
		return 1
	}
	if mgrOpts != nil {
		_, stop, err := (*env).StartManager(context.Background(), *mgrOpts, true)
		if err != nil {
			fmt.Fprintln(os.Stderr, "starting kubefarm-manager:", err)
			return 1
		}
		defer stop()
	}
	return m.Run()
}

// WriteKubeconfig provisions user (see AddUser) and writes a kubeconfig for
// it into dir, for a binary under test; it returns the file's path.
func (e *Env) WriteKubeconfig(user envtest.User, dir string) (string, error) {
	authn, err := e.AddUser(user)
	if err != nil {
		return "", err
	}
	data, err := authn.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, user.Name+".kubeconfig")
	return path, os.WriteFile(path, data, 0o600)
}

// StartT starts an environment for one test and stops it when the test ends.
func StartT(t testing.TB, opts Options) *Env {
	t.Helper()
	env, err := Start(opts)
	t.Cleanup(func() {
		if env != nil {
			_ = env.Stop()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// BuildBinary builds the main package in the test's working directory into
// a temporary folder, so a test runs the binary that ships.
func BuildBinary(t testing.TB, name string) string {
	t.Helper()
	binary := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return binary
}

// RunManager starts a controller-runtime manager (or anything with Start) in
// the background; the returned function stops it and waits until it has.
func RunManager(mgr interface{ Start(context.Context) error }) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// NewNamespace creates a namespace named prefix plus a random suffix, so
// each test owns its objects on the shared API server, and returns its name.
func (e *Env) NewNamespace(t testing.TB, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating a namespace %q...: %v", prefix, err)
	}
	return ns.Name
}

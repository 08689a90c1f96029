package main

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefarm/kubefarm/pxe/bootproto"
)

// agentRig is an agent against a fakePXE whose heartbeats the test ticks
// by hand (Deps.After) on a clock it sets (Deps.Now).
type agentRig struct {
	t       *testing.T
	pxe     *fakePXE
	o       Options
	deps    Deps
	ticks   chan time.Time
	mu      sync.Mutex
	now     time.Time
	waits   []time.Duration
	reboots int
}

func newAgentRig(t *testing.T, rebootAfterLogin *metav1.Duration) *agentRig {
	r := &agentRig{t: t, ticks: make(chan time.Time), now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		pxe: &fakePXE{configs: 1, rebootAfterLogin: rebootAfterLogin, beats: make(chan bootproto.Heartbeat, 16)}}
	srv := httptest.NewServer(r.pxe)
	t.Cleanup(srv.Close)
	r.o = nodeRoot(t, srv.URL)
	starter := &fakeKubeletStarter{root: r.o.Root}
	r.deps = Deps{Guard: (&guard{}).load, StartUnits: starter.start, SetHostname: func(string) error { return nil }, Poll: 10 * time.Millisecond,
		Now: func() time.Time {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.now
		},
		After: func(d time.Duration) <-chan time.Time {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.waits = append(r.waits, d)
			return r.ticks
		},
		Reboot: func(context.Context) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.reboots++
			return nil
		},
	}
	return r
}

// start runs the agent's boot (or its restart) and its heartbeat loop; the
// returned function stops the loop and waits for it.
func (r *agentRig) start() (done chan struct{}, stop func()) {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	hb, err := run(ctx, r.o, r.deps, testr.New(r.t))
	if err != nil {
		r.t.Fatal(err)
	}
	done = make(chan struct{})
	go func() {
		defer close(done)
		hb.loop(ctx)
	}()
	stop = func() {
		cancel()
		<-done
	}
	r.t.Cleanup(stop)
	return done, stop
}

// beat ticks the loop once and returns the heartbeat kubefarm-pxe got.
func (r *agentRig) beat() bootproto.Heartbeat {
	r.t.Helper()
	r.ticks <- time.Time{}
	return <-r.pxe.beats
}

func (r *agentRig) advance(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now = r.now.Add(d)
}

func (r *agentRig) write(p, data string) {
	r.t.Helper()
	p = filepath.Join(r.o.Root, p)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// TestHeartbeatReboot: heartbeats name the boot; a failed one is only
// logged; when kubefarm-pxe answers reboot, Reboot is called once and the
// loop ends.
func TestHeartbeatReboot(t *testing.T) {
	r := newAgentRig(t, nil)
	done, _ := r.start()
	for i := range 3 {
		hb := r.beat()
		if hb.MAC != mac || hb.BootID != bootID || hb.RebootRequired != nil {
			t.Fatalf("heartbeat %d: %+v", i, hb)
		}
	}
	r.pxe.set(func(f *fakePXE) { f.beatCode = 403 })
	r.beat()
	r.pxe.set(func(f *fakePXE) { f.beatCode = 0 })
	r.beat() // the loop went on after the failure
	r.pxe.set(func(f *fakePXE) { f.reboot = true })
	r.beat()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reboots != 1 {
		t.Errorf("Reboot called %d times, want once", r.reboots)
	}
	if len(r.waits) != 6 {
		t.Errorf("%d waits, want 6 (one before each heartbeat, none after the reboot)", len(r.waits))
	}
	for _, d := range r.waits {
		if d < 12*time.Second || d > 18*time.Second {
			t.Errorf("wait %s: not 15s ±20%%", d)
		}
	}
}

// TestHeartbeatRebootRequiredFile: /run/reboot-required raises the signal,
// with the packages Debian lists beside it, and it stays raised.
func TestHeartbeatRebootRequiredFile(t *testing.T) {
	r := newAgentRig(t, nil)
	r.start()
	if hb := r.beat(); hb.RebootRequired != nil {
		t.Fatalf("signal without cause: %+v", hb.RebootRequired)
	}
	r.write("run/reboot-required", "*** System restart required ***\n")
	r.write("run/reboot-required.pkgs", "linux-image-6.1.0-30-amd64\nlibc6\nlinux-image-6.1.0-30-amd64\n")
	want := bootproto.RebootSignal{Reason: "RebootRequiredFile", Message: "/run/reboot-required exists (packages: linux-image-6.1.0-30-amd64, libc6)"}
	if hb := r.beat(); hb.RebootRequired == nil || *hb.RebootRequired != want {
		t.Fatalf("signal %+v, want %+v", hb.RebootRequired, want)
	}
	if err := os.Remove(filepath.Join(r.o.Root, "run/reboot-required")); err != nil {
		t.Fatal(err)
	}
	if hb := r.beat(); hb.RebootRequired == nil || *hb.RebootRequired != want {
		t.Errorf("signal after the file went %+v, want it kept", hb.RebootRequired)
	}
}

// TestHeartbeatInteractiveLogin: a user session raises InteractiveLogin
// once the pool's rebootAfterLogin has passed since the agent first saw
// it, also across an agent restart; other session classes and logind's
// FIFOs are no login.
func TestHeartbeatInteractiveLogin(t *testing.T) {
	r := newAgentRig(t, &metav1.Duration{Duration: time.Hour})
	_, stop := r.start()
	sessions := "run/systemd/sessions"
	r.write(sessions+"/c1", "UID=0\nUSER=root\nCLASS=background\nTYPE=unspecified\nSERVICE=cron\n")
	r.write(sessions+"/2", "UID=110\nUSER=lightdm\nCLASS=greeter\nTYPE=x11\n")
	if err := syscall.Mkfifo(filepath.Join(r.o.Root, sessions, "3.ref"), 0o600); err != nil {
		t.Fatal(err)
	}
	if hb := r.beat(); hb.RebootRequired != nil {
		t.Fatalf("signal without a login: %+v", hb.RebootRequired)
	}
	r.write(sessions+"/3", "# This is private data. Do not parse.\nUID=0\nUSER=root\nACTIVE=1\nREMOTE=0\nTYPE=tty\nCLASS=user\nTTY=ttyS0\nSERVICE=login\n")
	firstSeen := r.deps.Now()
	if hb := r.beat(); hb.RebootRequired != nil {
		t.Fatalf("signal at the login: %+v", hb.RebootRequired)
	}
	r.advance(59 * time.Minute)
	if hb := r.beat(); hb.RebootRequired != nil {
		t.Fatalf("signal before rebootAfterLogin: %+v", hb.RebootRequired)
	}

	// A restarted agent (the same boot; the person logged out meanwhile)
	// counts from the first login it saw, not from its start.
	stop()
	if err := os.Remove(filepath.Join(r.o.Root, sessions, "3")); err != nil {
		t.Fatal(err)
	}
	r.advance(59 * time.Second)
	r.start()
	if hb := r.beat(); hb.RebootRequired != nil {
		t.Fatalf("signal before rebootAfterLogin, after the restart: %+v", hb.RebootRequired)
	}
	r.advance(time.Second)
	hb := r.beat()
	want := "interactive login: session 3 of root on ttyS0 via login, first seen " + firstSeen.Format(time.RFC3339) + "; rebootAfterLogin is 1h0m0s"
	if hb.RebootRequired == nil || hb.RebootRequired.Reason != "InteractiveLogin" || hb.RebootRequired.Message != want {
		t.Fatalf("signal %+v, want InteractiveLogin %q", hb.RebootRequired, want)
	}
	if hb := r.beat(); hb.RebootRequired == nil || hb.RebootRequired.Reason != "InteractiveLogin" {
		t.Errorf("signal not kept: %+v", hb.RebootRequired)
	}
}

// TestHeartbeatLoginNever: without rebootAfterLogin a login never raises
// the signal.
func TestHeartbeatLoginNever(t *testing.T) {
	r := newAgentRig(t, nil)
	r.write("run/systemd/sessions/7", "USER=admin\nCLASS=user-early\nREMOTE=1\nREMOTE_HOST=10.0.0.1\nSERVICE=sshd\n")
	r.start()
	r.beat()
	r.advance(10000 * time.Hour)
	if hb := r.beat(); hb.RebootRequired != nil {
		t.Errorf("signal %+v without rebootAfterLogin", hb.RebootRequired)
	}
	if b, err := os.ReadFile(filepath.Join(r.o.Root, r.o.StateDir, loginFile)); err != nil || !strings.Contains(string(b), "session 7 of admin via sshd from 10.0.0.1") {
		t.Errorf("login record %q, %v", b, err)
	}
}

func TestUserSessionClasses(t *testing.T) {
	for _, tc := range []struct {
		class string
		login bool
	}{
		{"user", true}, {"user-early", true}, {"user-light", true}, {"user-early-light", true}, {"user-incomplete", true},
		{"greeter", false}, {"lock-screen", false}, {"background", false}, {"background-light", false},
		{"manager", false}, {"manager-early", false}, {"", false}, {"users", false},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "4"), []byte("CLASS="+tc.class+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := userSession(dir); ok != tc.login || err != nil {
			t.Errorf("class %q: login %v (%v), want %v", tc.class, ok, err, tc.login)
		}
	}
	if _, ok, err := userSession(filepath.Join(t.TempDir(), "none")); ok || !os.IsNotExist(err) {
		t.Errorf("no sessions directory: %v, %v", ok, err)
	}
}

func TestSanitize(t *testing.T) {
	got := clip(sanitize("a\nb\tc\xffd\u00a0é"+strings.Repeat("é", 200)), bootproto.MaxRebootMessage)
	if len(got) > bootproto.MaxRebootMessage || !strings.HasPrefix(got, "a b c?d é") {
		t.Errorf("%q", got)
	}
	if _, err := (bootproto.Heartbeat{MAC: mac, BootID: bootID, RebootRequired: &bootproto.RebootSignal{Reason: "InteractiveLogin", Message: got}}).Validate(); err != nil {
		t.Errorf("kubefarm-pxe refuses the sanitized message: %v", err)
	}
}

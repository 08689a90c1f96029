package main

// The heartbeats after the report: asking kubefarm-pxe whether to reboot,
// and telling it when the node wants a reboot (the drift signal). See the
// package comment.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefarm/kubefarm/agent/pxeclient"
	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
)

// The reasons of the drift signal, the RebootRequired condition's
// (kubefarm-pxe accepts only these two).
const (
	reasonInteractiveLogin   = kubefarmv1.ReasonInteractiveLogin
	reasonRebootRequiredFile = kubefarmv1.ReasonRebootRequiredFile
)

// Files in --state-dir besides the "configured" marker, each JSON with the
// boot ID it belongs to.
const (
	// settingsFile: what the node configuration said that the agent still
	// needs after the files are written (settings).
	settingsFile = "settings.json"
	// loginFile: when the agent first saw an interactive login (login).
	loginFile = "login.json"
)

// settings are what of the node configuration the heartbeats need. The
// configuration is fetched once per boot, so a restarted agent reads them
// from here.
type settings struct {
	BootID           string           `json:"bootID"`
	RebootAfterLogin *metav1.Duration `json:"rebootAfterLogin,omitempty"`
	// NetworkLinks are the bonds and VLANs of the machine's hostNetwork,
	// which must be up before the node counts as networked.
	NetworkLinks []string `json:"networkLinks,omitempty"`
}

// login is the first interactive login the agent saw in this boot.
type login struct {
	BootID    string    `json:"bootID"`
	FirstSeen time.Time `json:"firstSeen"`
	Session   string    `json:"session"` // who and how, for the message
}

// heartbeats is the loop after the report.
type heartbeats struct {
	o           Options
	d           Deps
	pxe         *pxeclient.Client
	mac, bootID string
	log         logr.Logger
	// rebootAfterLogin is the pool's; nil: a login never raises the
	// signal.
	rebootAfterLogin *time.Duration
	// login is the first interactive login of this boot; zero FirstSeen:
	// none yet.
	login login
	// signal, once raised, goes with every heartbeat.
	signal *bootproto.RebootSignal
}

func newHeartbeats(o Options, d Deps, pxe *pxeclient.Client, mac, bootID string, rebootAfterLogin *metav1.Duration, log logr.Logger) *heartbeats {
	h := &heartbeats{o: o, d: d, pxe: pxe, mac: mac, bootID: bootID, log: log}
	if rebootAfterLogin != nil {
		h.rebootAfterLogin = &rebootAfterLogin.Duration
	}
	var l login
	if err := readState(h.in(o.StateDir), loginFile, bootID, &l); err == nil && !l.FirstSeen.IsZero() {
		h.login = l
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Error(err, "the first interactive login of this boot is lost; counting from the next one seen")
	}
	return h
}

func (h *heartbeats) in(p string) string { return filepath.Join(h.o.Root, p) }

// loop beats until ctx ends or kubefarm-pxe asks for the reboot.
func (h *heartbeats) loop(ctx context.Context) {
	if h.o.HeartbeatInterval <= 0 {
		h.log.Info("heartbeats off: this boot is never asked to reboot, and never asks")
		return
	}
	h.log.Info("sending heartbeats", "interval", h.o.HeartbeatInterval.String(), "rebootAfterLogin", durationString(h.rebootAfterLogin))
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.d.After(jitter(h.o.HeartbeatInterval)):
		}
		if h.beat(ctx) {
			return
		}
	}
}

// jitter is d ±20%.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.4-0.2)*float64(d))
}

// beat sends one heartbeat, bounded by the interval, and reboots when told
// to. It reports whether it did.
func (h *heartbeats) beat(ctx context.Context) bool {
	h.drift()
	bctx, cancel := context.WithTimeout(ctx, h.o.HeartbeatInterval)
	reply, err := h.pxe.Heartbeat(bctx, bootproto.Heartbeat{MAC: h.mac, BootID: h.bootID, RebootRequired: h.signal})
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			h.log.Error(err, "heartbeat failed; the next one tries again")
		}
		return false
	}
	if !reply.Reboot {
		return false
	}
	h.log.Info("kubefarm-pxe asks this boot to reboot: the rollout replaces it")
	if h.d.Reboot == nil {
		h.log.Info("no way to reboot configured")
	} else if err := h.d.Reboot(ctx); err != nil {
		h.log.Error(err, "reboot failed; kubefarm-manager power-cycles the machine once the rollout's powerCycleAfter has passed")
	}
	return true
}

// drift raises the signal when there is cause. Once raised it stays.
func (h *heartbeats) drift() {
	if h.signal != nil {
		return
	}
	if msg, ok := rebootRequiredFile(h.in(h.o.RebootRequiredFile), h.o.RebootRequiredFile); ok {
		h.raise(reasonRebootRequiredFile, msg)
		return
	}
	now := h.d.Now()
	if h.login.FirstSeen.IsZero() {
		who, ok, err := userSession(h.in(h.o.SessionsDir))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			h.log.Error(err, "reading logind's sessions")
		}
		if !ok {
			return
		}
		h.login = login{BootID: h.bootID, FirstSeen: now, Session: who}
		if err := writeState(h.in(h.o.StateDir), loginFile, h.login); err != nil {
			h.log.Error(err, "recording the first interactive login; an agent restart would count from a later one")
		}
		h.log.Info("interactive login", "session", who, "rebootAfterLogin", durationString(h.rebootAfterLogin))
	}
	if h.rebootAfterLogin == nil || now.Sub(h.login.FirstSeen) < *h.rebootAfterLogin {
		return
	}
	h.raise(reasonInteractiveLogin, fmt.Sprintf("interactive login: %s, first seen %s; rebootAfterLogin is %s",
		h.login.Session, h.login.FirstSeen.UTC().Format(time.RFC3339), h.rebootAfterLogin))
}

func (h *heartbeats) raise(reason, message string) {
	h.signal = &bootproto.RebootSignal{Reason: reason, Message: clip(sanitize(message), bootproto.MaxRebootMessage)}
	h.log.Info("this boot asks to be replaced by a pristine one", "reason", reason, "message", h.signal.Message)
}

func durationString(d *time.Duration) string {
	if d == nil {
		return "never"
	}
	return d.String()
}

// maxRead bounds what is read of a file the node's users could write to.
const maxRead = 64 << 10

// rebootRequiredFile: the flag file (at path, named name) exists; the
// message names the packages Debian lists beside it, in name.pkgs.
func rebootRequiredFile(path, name string) (string, bool) {
	if _, err := os.Stat(path); err != nil {
		return "", false
	}
	msg := name + " exists"
	if b, err := readBounded(path + ".pkgs"); err == nil {
		var pkgs []string
		for _, p := range strings.Fields(string(b)) {
			if !slices.Contains(pkgs, p) {
				pkgs = append(pkgs, p)
			}
		}
		if len(pkgs) > 0 {
			msg += " (packages: " + strings.Join(pkgs, ", ") + ")"
		}
	}
	return msg, true
}

// userSession finds an interactive session in systemd-logind's session
// directory: one file per session (named by its ID; the ID.ref beside it
// is a FIFO, never opened) with KEY=value lines. The classes of a person's
// login are user and, since systemd 256, user-early (root's, by default),
// user-light and user-early-light (no service manager) and user-incomplete;
// greeter, lock-screen, background and manager sessions are no login. It
// returns who and how, for the message.
func userSession(dir string) (string, bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", false, err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.Contains(e.Name(), ".") {
			continue
		}
		b, err := readBounded(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // the session ended meanwhile
		}
		kv := map[string]string{}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), "="); ok {
				kv[k] = v
			}
		}
		if class := kv["CLASS"]; class != "user" && !strings.HasPrefix(class, "user-") {
			continue
		}
		who := "session " + e.Name()
		if u := kv["USER"]; u != "" {
			who += " of " + u
		}
		if t := kv["TTY"]; t != "" {
			who += " on " + t
		}
		if s := kv["SERVICE"]; s != "" {
			who += " via " + s
		}
		if r := kv["REMOTE_HOST"]; r != "" {
			who += " from " + r
		} else if kv["REMOTE"] == "1" {
			who += " (remote)"
		}
		return who, true, nil
	}
	return "", false, nil
}

// readBounded reads a regular file's first maxRead bytes without blocking
// on anything else (a FIFO put in its place).
func readBounded(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return io.ReadAll(io.LimitReader(f, maxRead))
}

// sanitize makes s one line of printable text, as kubefarm-pxe accepts.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == utf8.RuneError:
			return '?'
		case !unicode.IsPrint(r):
			return ' '
		}
		return r
	}, s)
}

// writeState writes v as name in dir, through a temporary file renamed
// into place.
func writeState(dir, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp := filepath.Join(dir, name+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// readState reads name in dir into v, which must be of boot bootID (its
// bootID member); another boot's is os.ErrNotExist.
func readState(dir, name, bootID string, v any) error {
	b, err := readBounded(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	var of struct {
		BootID string `json:"bootID"`
	}
	if err := json.Unmarshal(b, &of); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if of.BootID != bootID {
		return fmt.Errorf("%s is of boot %q: %w", name, of.BootID, os.ErrNotExist)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

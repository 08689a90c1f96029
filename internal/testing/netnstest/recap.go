package netnstest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// Recap repeats a test's failures once everything else has been printed.
// A failed test's cleanups dump process logs (StartPXE), and a long dump
// pushes the failure itself out of the tail a CI excerpt shows; the recap
// comes last. Create it before anything whose cleanup prints.
type Recap struct {
	t      testing.TB
	mu     sync.Mutex
	failed []string
}

// NewRecap returns t's recap; its cleanup runs after every cleanup
// registered later.
func NewRecap(t testing.TB) *Recap {
	r := &Recap{t: t}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.failed) > 0 {
			t.Logf("%s failed (repeated after the logs above):\n  %s", t.Name(), strings.Join(r.failed, "\n  "))
		}
	})
	return r
}

func (r *Recap) note(format string, args ...any) string {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.failed = append(r.failed, msg)
	r.mu.Unlock()
	return msg
}

// Errorf is t.Errorf, recapped.
func (r *Recap) Errorf(format string, args ...any) {
	r.t.Helper()
	r.t.Error(r.note(format, args...))
}

// Fatalf is t.Fatalf, recapped.
func (r *Recap) Fatalf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatal(r.note(format, args...))
}

// Fatal is t.Fatal, recapped.
func (r *Recap) Fatal(args ...any) {
	r.t.Helper()
	r.t.Fatal(r.note("%s", fmt.Sprint(args...)))
}

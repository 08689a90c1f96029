package procstat

import (
	"os"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		line    string
		command string
		cpu     time.Duration
		start   uint64
		ok      bool
	}{
		// utime 700, stime 300, cutime 20, cstime 10 ticks; starttime 5000.
		{"4242 (qemu-system-x86) S 1 4242 4242 0 -1 4194560 100 0 0 0 700 300 20 10 20 0 3 0 5000 1 2 3", "qemu-system-x86", 10300 * time.Millisecond, 5000, true},
		// A command with a space and a ")" of its own: the last ")" ends it.
		{"7 (a b) c)) R 1 7 7 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 99 0 0", "a b) c)", 100 * time.Millisecond, 99, true},
		{"7 (short) R 1 2 3", "", 0, 0, false},
		{"no parentheses at all", "", 0, 0, false},
		{"7 (x) R 1 7 7 0 -1 0 0 0 0 0 one 2 3 4 20 0 1 0 99 0 0", "", 0, 0, false},
	} {
		p, ok := ParseStat([]byte(tc.line))
		if ok != tc.ok || p.Command != tc.command || p.CPU != tc.cpu || p.Start != tc.start {
			t.Errorf("ParseStat(%q) = %+v, %v; want %q, %v, start %d, %v", tc.line, p, ok, tc.command, tc.cpu, tc.start, tc.ok)
		}
	}
	// This process, as the kernel writes it.
	p, ok := Stat(os.Getpid())
	if !ok || p.Command == "" || p.Start == 0 {
		t.Errorf("Stat(self) = %+v, %v", p, ok)
	}
}

//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat: Linux fixes it
// at 100 for user space on every architecture the e2e runs on.
const userHZ = 100

// procCPU is one process's CPU time so far: its own and that of the
// children it has reaped, user and system, in ticks.
type procCPU struct {
	label string
	start uint64 // start time, in ticks after boot: tells a reused pid apart
	ticks uint64
}

// hostCPU is every host process's CPU time at one moment, and the host's
// idle time (idle and iowait of all CPUs) then.
type hostCPU struct {
	at    time.Time
	idle  uint64
	procs map[int]procCPU
}

// logHostCPU takes the host's CPU times now and, when t ends, says which
// processes used the host's CPUs in between, grouped by command (a
// container's process marked "in a pod"), and how idle the host was. The
// scenario's minutes are mostly the TCG machines' waits: this is the record
// of what they compete with for the CPUs, run after run. A process's time
// includes its reaped children's: a qemu the test started and stopped counts
// under the test's binary, a daemonized one (libvirt's) under the process
// that reaped it, in a container its init. Processes that came and went
// unreaped by a living process are not counted (the total says how much
// that is).
func logHostCPU(t *testing.T) {
	t.Helper()
	before := readHostCPU()
	t.Cleanup(func() {
		after := readHostCPU()
		t.Logf("host CPU during %s:%s", t.Name(), hostCPUReport(before, after))
	})
}

func readHostCPU() hostCPU {
	h := hostCPU{at: time.Now(), procs: map[int]procCPU{}}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		h.idle = idleTicks(b)
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue // gone since the listing
		}
		p, ok := parseProcStat(b)
		if !ok {
			continue
		}
		if cg, err := os.ReadFile(filepath.Join(d, "cgroup")); err == nil && bytes.Contains(cg, []byte("kubepods")) {
			p.label += " (in a pod)"
		}
		h.procs[pid] = p
	}
	return h
}

// idleTicks is the idle and iowait time of all CPUs from /proc/stat's
// first line.
func idleTicks(stat []byte) uint64 {
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 6 || f[0] != "cpu" {
		return 0
	}
	idle, _ := strconv.ParseUint(f[4], 10, 64)
	iowait, _ := strconv.ParseUint(f[5], 10, 64)
	return idle + iowait
}

// parseProcStat reads the command, start time and CPU times of one
// /proc/<pid>/stat. The command is between the first "(" and the last ")":
// it may hold spaces and parentheses itself.
func parseProcStat(b []byte) (procCPU, bool) {
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procCPU{}, false
	}
	// After the command: state (field 3), ..., utime (14), stime (15),
	// cutime (16), cstime (17), ..., starttime (22).
	f := strings.Fields(s[end+1:])
	if len(f) < 20 {
		return procCPU{}, false
	}
	var n [5]uint64
	for i, idx := range []int{11, 12, 13, 14, 19} {
		v, err := strconv.ParseUint(f[idx], 10, 64)
		if err != nil {
			return procCPU{}, false
		}
		n[i] = v
	}
	return procCPU{label: s[open+1 : end], ticks: n[0] + n[1] + n[2] + n[3], start: n[4]}, true
}

// hostCPUReport is the CPU seconds each command used between before and
// after (a process started in between counts from zero), the most first,
// as a share of what the host's CPUs could give in that time.
func hostCPUReport(before, after hostCPU) string {
	used := map[string]uint64{}
	var total uint64
	for pid, p := range after.procs {
		d := p.ticks
		if b, ok := before.procs[pid]; ok && b.start == p.start && b.ticks <= p.ticks {
			d = p.ticks - b.ticks
		}
		used[p.label] += d
		total += d
	}
	labels := make([]string, 0, len(used))
	for l := range used {
		labels = append(labels, l)
	}
	sort.Slice(labels, func(i, j int) bool {
		if used[labels[i]] != used[labels[j]] {
			return used[labels[i]] > used[labels[j]]
		}
		return labels[i] < labels[j]
	})
	wall := after.at.Sub(before.at).Seconds()
	capacity := wall * float64(numCPU())
	idle := float64(after.idle-before.idle) / userHZ
	var b strings.Builder
	fmt.Fprintf(&b, "\n  %.0f s of wall time on %d CPUs: %.0f CPU-seconds, %.0f idle (%.0f%%); living processes used %.0f, with the children they reaped (stopped machines' qemu under their reaper)",
		wall, numCPU(), capacity, idle, 100*idle/capacity, float64(total)/userHZ)
	for i, l := range labels {
		if i == 25 || used[l] == 0 {
			break
		}
		fmt.Fprintf(&b, "\n  %8.0f s %5.1f%%  %s", float64(used[l])/userHZ, 100*float64(used[l])/userHZ/capacity, l)
	}
	return b.String()
}

// numCPU is how many CPUs /proc/stat lists (cpu0, cpu1, ...): the host's,
// whatever this process's affinity.
func numCPU() int {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 1
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "cpu") && len(line) > 3 && line[3] >= '0' && line[3] <= '9' {
			n++
		}
	}
	return max(n, 1)
}

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		line       string
		label      string
		ticks, beg uint64
		ok         bool
	}{
		{"4242 (qemu-system-x86) S 1 4242 4242 0 -1 4194560 100 0 0 0 700 300 20 10 20 0 3 0 5000 1 2 3", "qemu-system-x86", 1030, 5000, true},
		// A command with a space and a ")" of its own: the last ")" ends it.
		{"7 (a b) c)) R 1 7 7 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 99 0 0", "a b) c)", 10, 99, true},
		{"7 (short) R 1 2 3", "", 0, 0, false},
		{"no parentheses at all", "", 0, 0, false},
		{"7 (x) R 1 7 7 0 -1 0 0 0 0 0 one 2 3 4 20 0 1 0 99 0 0", "", 0, 0, false},
	} {
		p, ok := parseProcStat([]byte(tc.line))
		if ok != tc.ok || p.label != tc.label || p.ticks != tc.ticks || p.start != tc.beg {
			t.Errorf("parseProcStat(%q) = %+v, %v; want label %q, ticks %d, start %d, %v", tc.line, p, ok, tc.label, tc.ticks, tc.beg, tc.ok)
		}
	}
	if got := idleTicks([]byte("cpu  10 0 5 300 7 0 1 0 0 0\ncpu0 5 0 2 150 3 0 0 0 0 0\n")); got != 307 {
		t.Errorf("idleTicks = %d, want 307 (idle 300 + iowait 7)", got)
	}
}

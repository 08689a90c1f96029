// Package procstat reads processes' CPU time from /proc: for the
// benchmarks' "CPU per unit of work" figures, and for the e2e's record of
// which processes used the host's CPUs.
package procstat

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const clkTck = 100 // USER_HZ on Linux

// Proc is what the CPU figures need of one /proc/<pid>/stat.
type Proc struct {
	// Command is between the first "(" and the last ")": it may hold
	// spaces and parentheses itself.
	Command string
	// CPU is user and system time, the process's own and that of the
	// children it has reaped.
	CPU time.Duration
	// Start is when it started, in clock ticks after boot: a pid reused
	// by another process has another.
	Start uint64
}

// ParseStat reads one /proc/<pid>/stat.
func ParseStat(b []byte) (Proc, bool) {
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return Proc{}, false
	}
	// The fields after the command: state is field 3, utime 14, stime 15,
	// cutime 16, cstime 17, starttime 22.
	f := strings.Fields(s[end+1:])
	if len(f) < 20 {
		return Proc{}, false
	}
	var n [5]uint64
	for i, field := range []int{14, 15, 16, 17, 22} {
		v, err := strconv.ParseUint(f[field-3], 10, 64)
		if err != nil {
			return Proc{}, false
		}
		n[i] = v
	}
	ticks := n[0] + n[1] + n[2] + n[3]
	return Proc{Command: s[open+1 : end], CPU: time.Duration(ticks) * time.Second / clkTck, Start: n[4]}, true
}

// Stat is pid's /proc/<pid>/stat; false when the process is gone.
func Stat(pid int) (Proc, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Proc{}, false
	}
	return ParseStat(b)
}

// TreeCPU is the CPU time (user + system) used so far by pid, its reaped
// children (tftpd-hpa forks one per transfer) and its live descendants
// (nginx's workers). 0 when the process is gone.
func TreeCPU(pid int) time.Duration {
	p, ok := Stat(pid)
	if !ok {
		return 0
	}
	total := p.CPU
	for _, c := range Children(pid) {
		total += TreeCPU(c)
	}
	return total
}

// Children are the live child processes of pid.
func Children(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		c, _ := os.ReadFile(t)
		for _, p := range strings.Fields(string(c)) {
			if n, err := strconv.Atoi(p); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// Command is the command name of pid (/proc/<pid>/comm), "" when it is gone.
func Command(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

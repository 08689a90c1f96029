// Package procstat reads the CPU time of benchmarked processes from /proc,
// for the benchmarks' "CPU per unit of work" figures.
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

// TreeCPU is the CPU time (user + system) used so far by pid, its reaped
// children (tftpd-hpa forks one per transfer) and its live descendants
// (nginx's workers). 0 when the process is gone.
func TreeCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14, stime 15, cutime 16, cstime 17.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return 0
	}
	var ticks int64
	for _, i := range []int{14, 15, 16, 17} {
		v, _ := strconv.ParseInt(f[i-3], 10, 64)
		ticks += v
	}
	total := time.Duration(ticks) * time.Second / clkTck
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

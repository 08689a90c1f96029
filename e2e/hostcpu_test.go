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

	"github.com/kubefarm/kubefarm/internal/testing/procstat"
)

// userHZ is the unit of /proc/stat's CPU times: Linux fixes it at 100 for
// user space on every architecture the e2e runs on.
const userHZ = 100

// hostCPU is every host process's CPU time at one moment, and the host's
// idle time (idle and iowait of all CPUs) then.
type hostCPU struct {
	at    time.Time
	cpus  int
	idle  uint64
	procs map[int]procstat.Proc
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
	h := hostCPU{at: time.Now(), procs: map[int]procstat.Proc{}}
	h.cpus = 1
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		h.idle, h.cpus = idleTicks(b), max(numCPU(b), 1)
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		p, ok := procstat.Stat(pid)
		if !ok {
			continue // gone since the listing
		}
		if cg, err := os.ReadFile(filepath.Join(d, "cgroup")); err == nil && bytes.Contains(cg, []byte("kubepods")) {
			p.Command += " (in a pod)"
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

// hostCPUReport is the CPU seconds each command used between before and
// after (a process started in between counts from zero), the most first,
// as a share of what the host's CPUs could give in that time.
func hostCPUReport(before, after hostCPU) string {
	used := map[string]time.Duration{}
	var total time.Duration
	for pid, p := range after.procs {
		d := p.CPU
		if b, ok := before.procs[pid]; ok && b.Start == p.Start && b.CPU <= p.CPU {
			d = p.CPU - b.CPU
		}
		used[p.Command] += d
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
	capacity := wall * float64(after.cpus)
	idle := float64(after.idle-before.idle) / userHZ
	var b strings.Builder
	fmt.Fprintf(&b, "\n  %.0f s of wall time on %d CPUs: %.0f CPU-seconds, %.0f idle (%.0f%%); living processes used %.0f, with the children they reaped (stopped machines' qemu under their reaper)",
		wall, after.cpus, capacity, idle, 100*idle/capacity, total.Seconds())
	for i, l := range labels {
		if i == 25 || used[l] == 0 {
			break
		}
		fmt.Fprintf(&b, "\n  %8.0f s %5.1f%%  %s", used[l].Seconds(), 100*used[l].Seconds()/capacity, l)
	}
	return b.String()
}

// numCPU is how many CPUs /proc/stat lists (cpu0, cpu1, ...): the host's,
// whatever this process's affinity.
func numCPU(stat []byte) int {
	n := 0
	for _, line := range strings.Split(string(stat), "\n") {
		if strings.HasPrefix(line, "cpu") && len(line) > 3 && line[3] >= '0' && line[3] <= '9' {
			n++
		}
	}
	return n
}

func TestIdleTicks(t *testing.T) {
	if got := idleTicks([]byte("cpu  10 0 5 300 7 0 1 0 0 0\ncpu0 5 0 2 150 3 0 0 0 0 0\n")); got != 307 {
		t.Errorf("idleTicks = %d, want 307 (idle 300 + iowait 7)", got)
	}
	if got := numCPU([]byte("cpu  10 0 5 300 7 0 1 0 0 0\ncpu0 5 0 2 150 3 0 0 0 0 0\ncpu1 5 0 3 150 4 0 1 0 0 0\nintr 1\n")); got != 2 {
		t.Errorf("numCPU = %d, want 2", got)
	}
	if got := idleTicks([]byte("intr 1 2 3\n")); got != 0 {
		t.Errorf("idleTicks of no cpu line = %d, want 0", got)
	}
}

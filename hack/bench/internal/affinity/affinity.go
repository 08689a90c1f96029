// Package affinity places the benchmarks' processes on CPUs: the server
// under test on ServerCPU, its load (clients, the load generator, the API
// server behind it) on ClientCPU, the same for kubefarm-pxe and its peer,
// so that the two never share or fight over a core by chance and the
// server's CPU figure is its own.
package affinity

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// ServerCPU and ClientCPU are the two CPUs of the benchmarks' 2-core
// machines.
const ServerCPU, ClientCPU = 0, 1

// Set sets the CPU mask of every thread of pid to cpus. Threads and
// processes created afterwards inherit their creator's mask; the loop
// repeats until no thread appeared that it has not set.
func Set(pid int, cpus ...int) error {
	return SetMask(pid, Mask(cpus...))
}

// SetMask is Set with a mask, e.g. one read back to restore it.
func SetMask(pid int, set *unix.CPUSet) error {
	done := map[int]bool{}
	for round := 0; round < 10; round++ {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return err
		}
		fresh := false
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil || done[tid] {
				continue
			}
			fresh = true
			if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("sched_setaffinity %d: %w", tid, err)
			}
			done[tid] = true
		}
		if !fresh {
			return nil
		}
	}
	return fmt.Errorf("pid %d kept starting threads", pid)
}

// Mask is a mask of the given CPUs.
func Mask(cpus ...int) *unix.CPUSet {
	var s unix.CPUSet
	for _, c := range cpus {
		s.Set(c)
	}
	return &s
}

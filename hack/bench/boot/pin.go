package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// TFTP placement (-pin): the server under test on serverCPU, every client
// (this process's Go client, the curl and atftp processes it starts) on
// clientCPU, the same for both servers, as in the DHCP benchmark. A
// lockstep transfer is a ping-pong of one DATA and one ACK per block; left
// to the scheduler on 2 cores, client and server sometimes share a core
// (cheap wake-ups) and sometimes not (an inter-processor wake-up per
// packet, expensive in a VM), so one fetch took 12 or 40 ms depending on
// where the threads happened to run, and a multi-threaded server landed
// apart from its client more often than the single-threaded tftpd-hpa.
// Pinned, every packet crosses cores, as it crosses machines in a farm.
const serverCPU, clientCPU = 0, 1

// setAffinity sets the CPU mask of every thread of pid. Threads and
// processes created afterwards inherit their creator's mask; the loop
// repeats until no thread appeared that it has not set.
func setAffinity(pid int, set *unix.CPUSet) error {
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

// cpuSet is a mask of the given CPUs.
func cpuSet(cpus ...int) *unix.CPUSet {
	var s unix.CPUSet
	for _, c := range cpus {
		s.Set(c)
	}
	return &s
}

// pinTFTP places the servers' processes on serverCPU and this process on
// clientCPU, and returns a function that gives them all back the mask this
// process started with.
func pinTFTP(servers []int) (func(), error) {
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		return nil, err
	}
	if !orig.IsSet(serverCPU) || !orig.IsSet(clientCPU) {
		return nil, fmt.Errorf("CPUs %d and %d are not both available (mask has %d CPUs)", serverCPU, clientCPU, orig.Count())
	}
	restore := func() {
		for _, pid := range append([]int{os.Getpid()}, servers...) {
			_ = setAffinity(pid, &orig)
		}
	}
	for _, pid := range servers {
		if err := setAffinity(pid, cpuSet(serverCPU)); err != nil {
			restore()
			return nil, err
		}
	}
	if err := setAffinity(os.Getpid(), cpuSet(clientCPU)); err != nil {
		restore()
		return nil, err
	}
	return restore, nil
}

package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/kubefarm/kubefarm/hack/bench/internal/affinity"
)

// TFTP placement (-pin): the server under test on affinity.ServerCPU,
// every client (this process's Go client, the curl and atftp processes it
// starts) on affinity.ClientCPU, the same for both servers, as in the DHCP
// benchmark. A lockstep transfer is a ping-pong of one DATA and one ACK per
// block; left to the scheduler on 2 cores, client and server sometimes
// share a core (cheap wake-ups) and sometimes not (an inter-processor
// wake-up per packet, expensive in a VM), so one fetch took 12 or 40 ms
// depending on where the threads happened to run, and a multi-threaded
// server landed apart from its client more often than the single-threaded
// tftpd-hpa. Pinned, every packet crosses cores, as it crosses machines in
// a farm.
const serverCPU, clientCPU = affinity.ServerCPU, affinity.ClientCPU

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
			_ = affinity.SetMask(pid, &orig)
		}
	}
	for _, pid := range servers {
		if err := affinity.Set(pid, serverCPU); err != nil {
			restore()
			return nil, err
		}
	}
	if err := affinity.Set(os.Getpid(), clientCPU); err != nil {
		restore()
		return nil, err
	}
	return restore, nil
}

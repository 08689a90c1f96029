package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// start launches a long-running component in its own session, so it outlives
// the command that started it, with its output in logs/<name>.log and its
// PID in run/<name>.pid. A component that is already running is left alone.
func (c *Cluster) start(name string, argv []string, env ...string) error {
	if pid, ok := c.running(name); ok {
		fmt.Printf("  %s already running (pid %d)\n", name, pid)
		return nil
	}
	for _, d := range []string{"logs", "run"} {
		if err := os.MkdirAll(c.path(d), 0o755); err != nil {
			return err
		}
	}
	logFile, err := os.OpenFile(c.path("logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	pid := cmd.Process.Pid
	// Reap it if it dies while this process still runs; after that, init does.
	go func() { _ = cmd.Wait() }()
	fmt.Printf("  %s started (pid %d, log %s)\n", name, pid, c.path("logs", name+".log"))
	return os.WriteFile(c.path("run", name+".pid"), []byte(strconv.Itoa(pid)), 0o644)
}

// running reports the PID of a component whose recorded process is alive and
// still the same program (a PID can be reused after a reboot or crash).
func (c *Cluster) running(name string) (int, bool) {
	data, err := os.ReadFile(c.path("run", name+".pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil || strings.Contains(string(stat), ") Z ") {
		return 0, false // gone, or a zombie
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return 0, false
	}
	// Right after exec the kernel briefly shows an empty command line; the
	// process is ours then. Otherwise it must name this cluster's state.
	if len(cmdline) > 0 && !strings.Contains(string(cmdline), c.StateDir) {
		return 0, false
	}
	return pid, true
}

// stop ends a component by PID: SIGTERM, then SIGKILL after grace.
func (c *Cluster) stop(name string, grace time.Duration) {
	pid, ok := c.running(name)
	if ok {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		if !waitGone(pid, grace) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			waitGone(pid, 5*time.Second)
		}
		fmt.Printf("  %s stopped (pid %d)\n", name, pid)
	}
	_ = os.Remove(c.path("run", name+".pid"))
}

func waitGone(pid int, timeout time.Duration) bool {
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		err := syscall.Kill(pid, 0)
		if errors.Is(err, syscall.ESRCH) {
			return true, nil
		}
		stat, rerr := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return rerr != nil || strings.Contains(string(stat), ") Z "), nil
	})
	return err == nil
}

// processesMentioning lists PIDs whose command line contains s: the
// containerd shims of this cluster name its socket, which lives in StateDir.
// This process and its ancestors (make, the shell) are never counted.
func processesMentioning(s string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	ancestors := map[int]bool{}
	for pid := os.Getpid(); pid > 1 && !ancestors[pid]; pid = parentOf(pid) {
		ancestors[pid] = true
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || ancestors[pid] {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// logTail returns the last lines of a component's log, for error messages.
func (c *Cluster) logTail(name string, lines int) string {
	data, err := os.ReadFile(c.path("logs", name+".log"))
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

func parentOf(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may contain spaces; fields after its ')' are fixed.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Down stops everything the cluster started and removes what it created:
// components by PID, every container by runc, mounts under StateDir, the
// pods' network namespaces, the bridge and the iptables rules, then
// StateDir itself. Logs are moved to StateDir-logs for post-mortems. Down
// is safe to run at any point, also when Up crashed halfway or never ran.
func (c *Cluster) Down() error {
	for _, name := range []string{"kube-proxy", "kubelet", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		c.stop(name, 15*time.Second)
	}
	c.killContainers()
	c.stop("containerd", 15*time.Second)
	// Shims outlive containerd by design; ours name our socket path.
	for _, pid := range processesMentioning(c.containerdSocket()) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	c.stop("dns", 5*time.Second)
	c.stop("registry", 5*time.Second)
	c.powerOffAll()
	c.cleanupNetwork()
	for _, link := range c.containerLogLinks() {
		_ = os.Remove(link)
	}
	if err := c.unmountAll(); err != nil {
		return err
	}
	if _, err := os.Stat(c.path("logs")); err == nil {
		logs := c.StateDir + "-logs"
		_ = os.RemoveAll(logs)
		_ = os.Rename(c.path("logs"), logs)
		fmt.Printf("logs kept in %s\n", logs)
	}
	if err := os.RemoveAll(c.StateDir); err != nil {
		return fmt.Errorf("removing %s: %w", c.StateDir, err)
	}
	return nil
}

// killContainers force-deletes every container runc knows in this cluster's
// runc root, so no workload survives the cluster.
func (c *Cluster) killContainers() {
	namespaces, _ := os.ReadDir(c.path("runc"))
	for _, ns := range namespaces {
		root := c.path("runc", ns.Name())
		ids, _ := os.ReadDir(root)
		for _, id := range ids {
			_ = exec.Command("runc", "--root", root, "delete", "--force", id.Name()).Run()
		}
	}
}

// unmountAll lazily unmounts every mount point under StateDir, deepest first
// (overlay rootfs, shm, projected volumes, the kubelet's bind mounts).
func (c *Cluster) unmountAll() error {
	for attempt := 0; attempt < 3; attempt++ {
		points, err := mountsUnder(c.StateDir)
		if err != nil {
			return err
		}
		if len(points) == 0 {
			return nil
		}
		for _, p := range points {
			_ = unix.Unmount(p, unix.MNT_DETACH)
		}
	}
	left, _ := mountsUnder(c.StateDir)
	if len(left) > 0 {
		return fmt.Errorf("mounts left under %s: %v", c.StateDir, left)
	}
	return nil
}

func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			points = append(points, fields[4])
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	return points, s.Err()
}

// cleanupNetwork removes the pods' network namespaces, the bridge and the
// iptables rules of kube-proxy and the CNI plugins.
func (c *Cluster) cleanupNetwork() {
	// containerd names pod network namespaces cni-<uuid> under /var/run/netns.
	// Boot network clients of the scenarios are named BootNetnsPrefix-*;
	// deleting one deletes its veth pair.
	// A pod namespace can be mounted twice: on the folder and, when the
	// folder was bind mounted onto itself after the pod started (as the
	// first `ip netns add` does; sharedNetnsDir prevents it for clusters
	// brought up since), underneath it too, where unlink fails with EBUSY.
	// Then the folder's own bind mount goes, and the round is repeated on
	// what it hid.
	for round := 0; round < 3; round++ {
		busy := false
		entries, err := os.ReadDir(NetnsDir)
		if err != nil {
			break
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "cni-") {
				p := filepath.Join(NetnsDir, e.Name())
				for unix.Unmount(p, unix.MNT_DETACH) == nil {
				}
				if err := os.Remove(p); errors.Is(err, unix.EBUSY) {
					busy = true
				}
			} else if strings.HasPrefix(e.Name(), BootNetnsPrefix) {
				_ = exec.Command("ip", "netns", "delete", e.Name()).Run()
			}
		}
		if !busy || unix.Unmount(NetnsDir, unix.MNT_DETACH) != nil {
			break
		}
	}
	for _, link := range bootVeths() {
		_ = exec.Command("ip", "link", "delete", link).Run()
	}
	_ = exec.Command("ip", "link", "delete", c.Bridge).Run()
	_ = exec.Command("ip", "link", "delete", c.BootBridge).Run()
	if _, err := os.Stat(c.bin("kube-proxy")); err == nil {
		_ = exec.Command(c.bin("kube-proxy"), "--cleanup", "--proxy-mode", "iptables").Run()
	}
	for _, table := range []string{"nat", "filter", "mangle"} {
		deleteChains(table, []string{"CNI-", "KUBE-"})
	}
}

// deleteChains rewrites a table without every rule and chain that mentions
// one of the prefixes (kube-proxy's and the CNI plugins'), in one atomic
// iptables-restore of that table.
func deleteChains(table string, prefixes []string) {
	out, err := exec.Command("iptables-save", "-t", table).Output()
	if err != nil {
		return
	}
	var keep []string
	changed := false
	for _, line := range strings.Split(string(out), "\n") {
		if (strings.HasPrefix(line, "-A ") || strings.HasPrefix(line, ":")) && mentions(line, prefixes) {
			changed = true
			continue
		}
		keep = append(keep, line)
	}
	if !changed {
		return
	}
	restore := exec.Command("iptables-restore")
	restore.Stdin = strings.NewReader(strings.Join(keep, "\n"))
	if b, err := restore.CombinedOutput(); err != nil {
		fmt.Printf("iptables-restore of table %s: %v: %s\n", table, err, b)
	}
}

func mentions(line string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.Contains(line, p) {
			return true
		}
	}
	return false
}

// Leftovers lists what Down should have removed but is still there. Empty
// means the machine is as it was before Up.
func (c *Cluster) Leftovers() []string {
	var left []string
	for _, pid := range processesMentioning(c.StateDir) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		left = append(left, fmt.Sprintf("process %d: %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " ")))
	}
	if points, _ := mountsUnder(c.StateDir); len(points) > 0 {
		left = append(left, fmt.Sprintf("mounts: %v", points))
	}
	if entries, err := os.ReadDir("/var/run/netns"); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "cni-") || strings.HasPrefix(e.Name(), BootNetnsPrefix) {
				left = append(left, "network namespace "+e.Name())
			}
		}
	}
	for _, link := range c.containerLogLinks() {
		left = append(left, "container log link "+link)
	}
	for _, br := range []string{c.Bridge, c.BootBridge} {
		if exec.Command("ip", "link", "show", br).Run() == nil {
			left = append(left, "bridge "+br)
		}
	}
	for _, link := range bootVeths() {
		left = append(left, "boot network veth "+link)
	}
	for _, table := range []string{"nat", "filter", "mangle"} {
		out, _ := exec.Command("iptables-save", "-t", table).Output()
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, ":") && (strings.Contains(line, "KUBE-") || strings.Contains(line, "CNI-")) {
				left = append(left, "iptables "+table+" chain "+strings.Fields(line[1:])[0])
			}
		}
	}
	if _, err := os.Stat(c.StateDir); err == nil {
		left = append(left, "state directory "+c.StateDir)
	}
	return left
}

// bootVeths are the host's links named like the host side of a boot network
// client's veth pair (BootVethPrefix, not the bridge).
func bootVeths() []string {
	ifaces, _ := net.Interfaces()
	var links []string
	for _, i := range ifaces {
		if strings.HasPrefix(i.Name, BootVethPrefix) {
			links = append(links, i.Name)
		}
	}
	return links
}

// containerLogLinks are the kubelet's symlinks in /var/log/containers (a
// fixed path) that point into this cluster's pod log directory.
func (c *Cluster) containerLogLinks() []string {
	entries, _ := os.ReadDir("/var/log/containers")
	var links []string
	for _, e := range entries {
		p := filepath.Join("/var/log/containers", e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, c.path("pod-logs")+"/") {
			links = append(links, p)
		}
	}
	return links
}

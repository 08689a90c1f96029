//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/e2e/cluster"
	"github.com/kubefarm/kubefarm/internal/testing/netnstest"
	"github.com/kubefarm/kubefarm/pxe/bootfile"
	"github.com/kubefarm/kubefarm/pxe/dhcp"
	"github.com/kubefarm/kubefarm/pxe/tftp"
)

// TestPXE boots a machine's first steps against the kubefarm-pxe pod of the
// admin cluster, with real clients on the boot network (the host bridge
// cluster.BootBridge that `up` creates):
//   - the kubefarm-pxe DaemonSet's pod is Ready (its cache and inventory
//     of Machines synced);
//   - a NodePool and a Machine created in the API make busybox udhcpc, in a
//     network namespace joined to the bridge with the Machine's MAC, get the
//     Machine's static address, router, DNS servers, domain, hostname and
//     boot file from the pod;
//   - curl fetches undionly.kpxe over TFTP from the pod, byte for byte the
//     host's Debian ipxe file the image was built from;
//   - /healthz and /metrics answer on the node's loopback
//     (cluster.PXEMetricsAddr), not over the boot network, and the DHCP
//     packet counter shows the offer and the ack;
//   - kubefarm-pxe recorded Offered and Acked Events on the Machine;
//   - the namespace, the client namespace and its veth leave nothing behind.
func TestPXE(t *testing.T) {
	netnstest.RequireRoot(t)
	if _, err := exec.LookPath("busybox"); err != nil {
		t.Skip("SKIPPED, NOT PASSED: busybox is not installed (make deps)")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("SKIPPED, NOT PASSED: curl is not installed (make deps)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	_, cs, c := adminClients(t)
	var err error
	const (
		serverIP = "10.123.0.1"
		mac      = "02:7b:00:00:00:2a"
		ip       = "10.123.0.42"
		hostname = "pxe-e2e-42"
	)
	httpBase := fmt.Sprintf("http://%s:%d", serverIP, cluster.PXEHTTPPort)

	var pod corev1.Pod
	t.Run("kubefarm-pxe is Ready", func(t *testing.T) {
		var ds *appsv1.DaemonSet
		poll(t, ctx, "the kubefarm-pxe DaemonSet never became Ready", 3*time.Minute, func(ctx context.Context) (bool, error) {
			ds, err = cs.AppsV1().DaemonSets("kubefarm-system").Get(ctx, "kubefarm-pxe", metav1.GetOptions{})
			return err == nil && ds.Status.DesiredNumberScheduled == 1 && ds.Status.NumberReady == 1 &&
				ds.Status.UpdatedNumberScheduled == 1, nil
		})
		pods, err := cs.CoreV1().Pods("kubefarm-system").List(ctx, metav1.ListOptions{
			LabelSelector: labels.SelectorFromSet(ds.Spec.Selector.MatchLabels).String(),
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && podReady(&p) {
				pod = p
			}
		}
		if pod.Name == "" {
			t.Fatalf("no Ready kubefarm-pxe pod among %d", len(pods.Items))
		}
		if !pod.Spec.HostNetwork {
			t.Fatalf("kubefarm-pxe pod %s is not on the host network", pod.Name)
		}
	})
	if t.Failed() {
		return
	}

	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "pxe-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteNamespace(t, cs, ns.Name) })
	pool := &kubefarmv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "farm"},
		Spec: kubefarmv1.NodePoolSpec{
			Cluster: "c1", BootImage: "img",
			Network: kubefarmv1.BootNetwork{
				Subnet: "10.123.0.0/24", Gateway: serverIP, DNS: []string{"10.123.0.53", "10.123.0.54"}, Domain: "farm.e2e",
				DynamicRange: &kubefarmv1.DynamicRange{Start: "10.123.0.200", End: "10.123.0.209"},
			},
			Machines: []kubefarmv1.MachineEntry{{Name: hostname, MACs: []string{mac}, IP: ip}},
		},
	}
	if err := c.Create(ctx, pool); err != nil {
		t.Fatalf("creating the NodePool: %v", err)
	}
	// The NodePool controller writes the pool's Machine; kubefarm-pxe
	// answers only once it has seen it.
	machine := &kubefarmv1.Machine{}
	poll(t, ctx, "the NodePool controller never wrote the Machine", time.Minute, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: pool.Name + "-" + hostname}, machine)
		return err == nil, client.IgnoreNotFound(err)
	})
	if machine.Spec.Hostname != hostname || machine.Spec.IP != ip || len(machine.Spec.MACs) != 1 || machine.Spec.MACs[0] != mac {
		t.Fatalf("the controller's Machine does not match the pool entry: %+v", machine.Spec)
	}

	cliNs := bootClient(t, mac)

	t.Run("udhcpc gets the Machine's lease", func(t *testing.T) {
		// kubefarm-pxe learns the Machine through its informers; until then
		// the MAC is unknown and ignored. Each udhcpc run gives up after a
		// few seconds (-n); the loop is bounded by the deadline.
		var env map[string]string
		var last []byte
		poll(t, ctx, "udhcpc never got a lease", 2*time.Minute, func(ctx context.Context) (bool, error) {
			// Option 93 = 0 (BIOS) and the PXE vendor class make it look
			// like a PXE ROM, which gets a boot file.
			env, last, err = netnstest.Udhcpc(ctx, cliNs, "eth0", netnstest.UdhcpcOptions{Tries: 3,
				Args: []string{"-V", "PXEClient:Arch:00000:UNDI:002001", "-x", "0x5d:0000"}})
			return err == nil, nil
		})
		if env == nil {
			t.Fatalf("no lease; udhcpc printed:\n%s", last)
		}
		for k, want := range map[string]string{
			"ip": ip, "subnet": "255.255.255.0", "router": serverIP, "dns": "10.123.0.53 10.123.0.54",
			"hostname": hostname, "domain": "farm.e2e", "serverid": serverIP,
			"siaddr": serverIP, "boot_file": bootfile.BinaryBIOS,
		} {
			if got := strings.TrimSpace(env[k]); got != want {
				t.Errorf("udhcpc %s = %q, want %q", k, got, want)
			}
		}
		// The script only records the lease; configure it as a client would.
		netnstest.Run(t, "ip", "-n", cliNs, "addr", "add", ip+"/24", "dev", "eth0")
	})
	if t.Failed() {
		return
	}

	t.Run("TFTP serves the host's undionly.kpxe", func(t *testing.T) {
		want, err := os.ReadFile(filepath.Join(cluster.IPXEDir, bootfile.BinaryBIOS))
		if err != nil {
			t.Fatal(err)
		}
		got := filepath.Join(t.TempDir(), bootfile.BinaryBIOS)
		cctx, ccancel := context.WithTimeout(ctx, time.Minute)
		defer ccancel()
		out, err := exec.CommandContext(cctx, "ip", "netns", "exec", cliNs, "curl", "-sS", "--max-time", "50",
			"--tftp-blksize", "1468", "-o", got, fmt.Sprintf("tftp://%s/%s", serverIP, bootfile.BinaryBIOS)).CombinedOutput()
		if err != nil {
			t.Fatalf("curl tftp: %v\n%s", err, out)
		}
		b, err := os.ReadFile(got)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, want) {
			t.Fatalf("TFTP gave %d bytes that differ from %s's %d", len(b), filepath.Join(cluster.IPXEDir, bootfile.BinaryBIOS), len(want))
		}
	})

	hc := netnstest.HTTPClient(cliNs)
	get := func(t *testing.T, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, httpBase+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return resp.StatusCode, string(b)
	}

	// The probe listener, on the node's loopback: this process's, the
	// node being this host.
	probe := func(t *testing.T, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+cluster.PXEMetricsAddr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return resp.StatusCode, string(b)
	}

	t.Run("healthz and metrics off the boot network", func(t *testing.T) {
		for _, p := range []string{"/healthz", "/metrics"} {
			if code, body := get(t, p); code != http.StatusNotFound {
				t.Errorf("%s over the boot network: %d %.80q, want 404", p, code, body)
			}
		}
		if code, body := probe(t, "/healthz"); code != http.StatusOK {
			t.Fatalf("/healthz: %d %s", code, body)
		}
		// Workers count a packet after replying to it: poll, bounded.
		var offered, acked, transfers float64
		poll(t, ctx, "the metrics never showed the DHCP offer and ack and the TFTP transfer", 30*time.Second, func(context.Context) (bool, error) {
			code, body := probe(t, "/metrics")
			if code != http.StatusOK {
				return false, nil
			}
			offered = counter(body, "kubefarm_pxe_dhcp_packets_total", map[string]string{"type": "DISCOVER", "result": string(dhcp.Offered)})
			acked = counter(body, "kubefarm_pxe_dhcp_packets_total", map[string]string{"type": "REQUEST", "result": string(dhcp.Acked)})
			transfers = counter(body, "kubefarm_pxe_tftp_transfers_total", map[string]string{"result": tftp.ResultOK})
			return offered >= 1 && acked >= 1 && transfers >= 1, nil
		})
		t.Logf("DHCP packets: %v offered, %v acked; TFTP transfers: %v ok", offered, acked, transfers)
	})

	t.Run("Offered and Acked Events on the Machine", func(t *testing.T) {
		var reasons map[string]int
		err := pollErr(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
			reasons = map[string]int{}
			for _, e := range machineEvents(ctx, cs, client.ObjectKeyFromObject(machine)) {
				reasons[e.reason]++
			}
			return reasons["Offered"] > 0 && reasons["Acked"] > 0, nil
		})
		if err != nil {
			t.Fatalf("no Offered and Acked Events on Machine %s/%s (reasons seen: %v): %v", ns.Name, machine.Name, reasons, err)
		}
	})

	// The pool opts in to a catch-all range: a MAC no Machine has gets an
	// address from it, and the lease is a DHCPLease object in the pool's
	// namespace (what lets replicas agree), written by the pod through the
	// chart's generated RBAC.
	t.Run("an unknown MAC gets a dynamic lease stored in the API", func(t *testing.T) {
		const stranger = "02:7b:00:00:00:99"
		netnstest.Run(t, "ip", "-n", cliNs, "addr", "flush", "dev", "eth0")
		netnstest.Run(t, "ip", "-n", cliNs, "link", "set", "eth0", "down")
		netnstest.Run(t, "ip", "-n", cliNs, "link", "set", "eth0", "address", stranger)
		netnstest.Run(t, "ip", "-n", cliNs, "link", "set", "eth0", "up")
		var env map[string]string
		var last []byte
		poll(t, ctx, "udhcpc never got a dynamic lease", time.Minute, func(ctx context.Context) (bool, error) {
			env, last, err = netnstest.Udhcpc(ctx, cliNs, "eth0", netnstest.UdhcpcOptions{Tries: 3})
			return err == nil, nil
		})
		if env == nil {
			t.Fatalf("no dynamic lease; udhcpc printed:\n%s", last)
		}
		got := strings.TrimSpace(env["ip"])
		if n, err := strconv.Atoi(strings.TrimPrefix(got, "10.123.0.")); err != nil || n < 200 || n > 209 {
			t.Fatalf("dynamic lease %q is not in 10.123.0.200-10.123.0.209", got)
		}
		if env["router"] != serverIP || env["hostname"] != "" {
			t.Errorf("dynamic lease options: router %q hostname %q, want the pool's router and no hostname", env["router"], env["hostname"])
		}
		var list kubefarmv1.DHCPLeaseList
		if err := c.List(ctx, &list, client.InNamespace(ns.Name)); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 || list.Items[0].Spec.MAC != stranger || list.Items[0].Spec.IP != got || list.Items[0].Spec.Pool != pool.Name {
			t.Fatalf("DHCPLeases in %s: %+v, want one for %s at %s", ns.Name, list.Items, stranger, got)
		}
		// The ACK extended the offer's hold to the pool's lease time (1h).
		if left := time.Until(list.Items[0].Spec.ExpireTime.Time); left < 50*time.Minute {
			t.Errorf("lease expires in %s, want about the pool's 1h lease time", left)
		}

		// Leases belong to their pool: the admin cluster's garbage collector
		// removes them with it.
		if err := c.Delete(ctx, pool); err != nil {
			t.Fatal(err)
		}
		poll(t, ctx, "the pool's DHCPLeases outlived it", time.Minute, func(ctx context.Context) (bool, error) {
			var l kubefarmv1.DHCPLeaseList
			if err := c.List(ctx, &l, client.InNamespace(ns.Name)); err != nil {
				return false, nil
			}
			return len(l.Items) == 0, nil
		})
	})
}

// pollErr polls cond until it holds or timeout passes (poll without a test).
// scenarioContext is the context of a long scenario: it ends margin before
// go test's -timeout would kill the process, so that the scenario fails
// with its own message and its cleanups still run; without a -timeout it
// ends after an hour.
func scenarioContext(t *testing.T, margin time.Duration) (context.Context, context.CancelFunc) {
	deadline, ok := t.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Hour)
	}
	return context.WithDeadline(context.Background(), deadline.Add(-margin))
}

func pollErr(ctx context.Context, timeout time.Duration, cond func(context.Context) (bool, error)) error {
	return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, cond)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// bootClient creates a network namespace joined to the boot bridge by a veth
// pair whose inside end, eth0, has mac. The namespace (and with it the veth
// pair) is deleted when the test ends, and the test checks it is gone.
func bootClient(t *testing.T, mac string) string {
	t.Helper()
	ns := fmt.Sprintf("%s-%d", cluster.BootNetnsPrefix, os.Getpid())
	host := fmt.Sprintf("%s%d", cluster.BootVethPrefix, os.Getpid()%100000)
	netnstest.Run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "delete", ns).CombinedOutput(); err != nil {
			t.Errorf("deleting namespace %s: %v %s", ns, err, out)
		}
		// The host end goes with its peer; the kernel may take a moment.
		if err := pollErr(context.Background(), 10*time.Second, func(context.Context) (bool, error) {
			return exec.Command("ip", "link", "show", host).Run() != nil, nil
		}); err != nil {
			t.Errorf("veth %s still exists after its namespace was deleted", host)
		}
	})
	netnstest.Run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	netnstest.Run(t, "ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns)
	netnstest.Run(t, "ip", "link", "set", host, "master", cluster.BootBridge)
	netnstest.Run(t, "ip", "link", "set", host, "up")
	netnstest.Run(t, "ip", "-n", ns, "link", "set", "eth0", "address", mac)
	netnstest.Run(t, "ip", "-n", ns, "link", "set", "eth0", "up")
	return ns
}

// deleteNamespace deletes a namespace and waits, bounded, until it is gone.
func deleteNamespace(t *testing.T, cs kubernetes.Interface, name string) {
	ctx := context.Background()
	if err := cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("deleting namespace %s: %v", name, err)
		return
	}
	if err := pollErr(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		return err != nil, nil
	}); err != nil {
		t.Errorf("namespace %s was not deleted: %v", name, err)
	}
}

// counter sums the samples of metric (Prometheus text format) whose labels
// include want; -1 when there is none.
func counter(text, metric string, want map[string]string) float64 {
	sum, found := 0.0, false
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if i := strings.LastIndex(line, "} "); i >= 0 {
			name, value, ok = line[:i+1], line[i+2:], true
		}
		if !ok {
			continue
		}
		match := true
		for k, v := range want {
			if !strings.Contains(name, k+`="`+v+`"`) {
				match = false
			}
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil && match {
			sum, found = sum+f, true
		}
	}
	if !found {
		return -1
	}
	return sum
}

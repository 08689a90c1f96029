//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	appsv1 "k8s.io/api/apps/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/e2e/cluster"
	nodeimage "github.com/kubefarm/kubefarm/images/node"
	"github.com/kubefarm/kubefarm/internal/testing/netnstest"
)

// TestNodeJoin is the whole promise on one machine: two qemu machines (TCG)
// on the boot bridge netboot from the kubefarm-pxe pod into the node image
// `make node-image` built, pushed as one OCI artifact to the local
// registry, and join a tenant cluster. The first is a server behind a
// Redfish BMC (sushy-tools in front of a libvirt domain, SeaBIOS running
// Debian's iPXE ROM, a blank disk first in its boot order), listed in the
// values with its BMC and powered on with `kubectl kubefarm power on
// --netboot`; the second (UEFI through OVMF, started with the demo's
// cluster.QemuArgs) is listed nowhere and boots in the pool's catch-all
// range (kubefarm's catchall example's dhcp-generate-names):
//   - the TenantCluster is Ready (NodePort endpoint on the host's address);
//   - the Redfish machine's Machine shows power On read through its BMC and
//     the plugin's On,NetbootOnce Succeeded; the BMC reads a Pxe override;
//   - the catch-all machine joins as 52-54-00-7b-00-3e, its Machine named
//     after its MAC with an address of the range; after the rolling
//     reboot-to-update it is the same Machine at the same address;
//   - the NodePool's Machine boots: DHCP, TFTP, the iPXE script, kernel,
//     initrd and root filesystem from the pod, which fetched them from the
//     registry by digest;
//   - kubefarm-agent fetches /config, kubelet TLS-bootstraps, the manager
//     approves its serving CSR, the agent's verdict makes NetworkVerified
//     True and the manager lifts the network taint; the Node is Ready;
//   - the Machine shows the boot ID the Node reports and the rootfs digest;
//   - a pod on the node runs, reaches a ClusterIP Service; kubectl logs and
//     exec work with the host's direct route to the node's kubelet port
//     rejected, so they can only go through Konnectivity; the tenant's
//     kubernetes Service points at the NodePort endpoint, and its
//     ClusterIP reaches a TLS server from the pod;
//   - the tenant's CoreDNS (from the e2e registry) is Ready, and a pod on
//     each node resolves the web Service and kubernetes.default to their
//     ClusterIPs through the kubelet's clusterDNS; each Node reports a
//     containerd:// runtime version;
//   - node identity (docs/security.md): an ordinary pod gets no answer from
//     kubefarm-pxe, and root on node 1 gets neither node 2's configuration
//     nor a certificate in another name;
//   - a pod on each node reaches the other's over the pod network, and a
//     ClusterIP Service answers from both (make demo's check, CheckSpread);
//   - the Machine's Events tell the boot story, and the test prints the
//     seconds from power-on to each stage;
//   - kube-proxy is switched to ipvs (helm upgrade) and rolls, then a
//     rolling reboot-to-update moves both machines to a new image, so they
//     boot with the ipvs proxier alone; a new Service's ClusterIP answers
//     from both nodes in ipvs mode, and again after a live switch to
//     nftables (docs/kube-proxy.md);
//   - last, a third machine with a MAC no Machine claims, powered through
//     an IPMI BMC, is discovered, enrolled with the kubectl plugin, and
//     joins; hung in a rollout it is power-cycled through IPMI; removed, it
//     is powered off (testDiscovery).
//
// KUBEFARM_NODE_IMAGE names the built image's folder (make e2e sets it).
func TestNodeJoin(t *testing.T) {
	netnstest.RequireRoot(t)
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("SKIPPED, NOT PASSED: qemu-system-x86_64 is not installed (make deps)")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("SKIPPED, NOT PASSED: iptables is not installed")
	}
	imgDir := os.Getenv("KUBEFARM_NODE_IMAGE")
	if imgDir == "" {
		t.Fatal("KUBEFARM_NODE_IMAGE is not set: it names the node image's folder (make e2e builds the image and sets it)")
	}
	// Each step bounds its own waits; the scenario as a whole is bounded
	// by go test's -timeout, less a margin for the cleanups (the tenant's
	// deletion, the machines' logs). A fixed budget for the sum of the
	// steps failed the last steps on a slower machine while each step was
	// within its own bound.
	ctx, cancel := scenarioContext(t, 3*time.Minute)
	defer cancel()
	logHostCPU(t)
	_, cs, c := adminClients(t)

	const (
		serverIP = cluster.BootIP
		mirror   = cluster.BootRegistryAddr
	)
	// Two machines, so that the rollout has a budget to respect and a
	// workload to spread; the first is the one the join's checks look at.
	// The second boots UEFI (OVMF), as the demo's second machine does:
	// kubefarm-pxe answers each firmware with its own iPXE binary.
	if !cluster.UEFIAvailable() {
		t.Fatalf("%s is missing: install the Debian package ovmf (make deps)", cluster.OVMF)
	}
	// The first is a server behind a Redfish BMC (sushy-tools and
	// libvirt), listed in the values with its BMC and powered on through
	// it. The second is listed nowhere: it boots in the pool's catch-all
	// range (kubefarm's catchall example's dhcp-generate-names) and joins
	// under the name its MAC makes, the name this test expects.
	vms := []*joinVM{
		// Two ports, bonded by the pool's hostNetwork (joinHostNetwork).
		{FarmMachine: cluster.FarmMachine{Name: "join-e2e-1", MAC: "52:54:00:7b:00:3d", IP: "10.123.0.61", Index: 0, SecondMAC: "52:54:00:7b:01:3d"}},
		{FarmMachine: cluster.FarmMachine{Name: "52-54-00-7b-00-3e", MAC: "52:54:00:7b:00:3e", Index: 1, UEFI: true}, catchAll: true},
	}
	mac, ip, hostname := vms[0].MAC, vms[0].IP, vms[0].Name
	var nodes []string
	for _, vm := range vms {
		nodes = append(nodes, vm.Name)
	}

	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "join-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-registered first: the tenant is deleted and gone
	// (its control plane pods freed from the small e2e node) before its
	// namespace goes, so the scenarios after this one start on an idle node.
	t.Cleanup(func() { deleteNamespace(t, cs, ns.Name) })
	attachRedfish(t, ctx, c, vms[0], ns.Name)

	// The tenant and its pool come from charts/kubefarm and a kubefarm
	// values file, installed through the Helm SDK as the README's install
	// section does; the image and its BootImage first, since the values
	// name it.
	// The image, as one OCI artifact in the local registry; kubefarm-pxe
	// fetches its blobs by digest.
	art, err := nodeimage.NewOCIArtifact(imgDir)
	if err != nil {
		t.Fatalf("the node image in %s: %v", imgDir, err)
	}
	repo := cluster.RegistryAddr + "/kubefarm/node"
	if _, err := art.Push(ctx, repo, "e2e", []name.Option{name.Insecure}); err != nil {
		t.Fatalf("pushing the node image: %v", err)
	}
	img := art.BootImage("e2e-"+art.Manifest.Artifacts[nodeimage.Rootfs].SHA256[:12], repo)
	if err := c.Create(ctx, img); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating the BootImage: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), img) })

	release := exampleTenantCluster(t).Name
	vals := joinValues(t, img.Name, serverIP, mirror, vms)
	kubeconfig := adminKubeconfigPath()
	if _, err := cluster.HelmUpgradeInstall(ctx, kubeconfig, release, ns.Name, chartPath("kubefarm"), vals); err != nil {
		t.Fatalf("helm install %s charts/kubefarm: %v", release, err)
	}
	// helm uninstall removes the TenantCluster and the NodePool, and with
	// them the Machines and the control plane: nothing is left behind.
	t.Cleanup(func() { uninstallCluster(t, c, kubeconfig, release, ns.Name) })
	// The plugin powers the first machine on: built while the tenant's
	// control plane comes up.
	startPluginBuild(ctx, t.TempDir())
	tc := &kubefarmv1.TenantCluster{}
	key := client.ObjectKey{Namespace: ns.Name, Name: release}
	if err := c.Get(ctx, key, tc); err != nil {
		t.Fatalf("the release made no TenantCluster %s: %v", key, err)
	}
	pool := &kubefarmv1.NodePool{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: release + "-workers"}, pool); err != nil {
		t.Fatalf("the release made no NodePool %s-workers: %v", release, err)
	}
	machineKey := client.ObjectKey{Namespace: ns.Name, Name: pool.Name + "-" + hostname}

	got := &kubefarmv1.TenantCluster{}
	poll(t, ctx, "the TenantCluster never became Ready", 10*time.Minute, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, got); err != nil {
			return false, nil
		}
		return meta.IsStatusConditionTrue(got.Status.Conditions, kubefarmv1.ConditionReady) &&
			meta.IsStatusConditionTrue(got.Status.Conditions, kubefarmv1.ConditionAddonsReady), nil
	})
	tenantCfg := tenantConfig(t, ctx, cs, got)
	tenant, err := kubernetes.NewForConfig(tenantCfg)
	if err != nil {
		t.Fatal(err)
	}
	// Before the uninstall (cleanups run last first), with the client of
	// the moment: the CA rotation replaces it.
	t.Cleanup(func() { logImagePulls(t, tenant) })

	// Power on, both at once; for make bench-node (which sets
	// KUBEFARM_BOOT_STAGES_OUT) one at a time, each with the machine to
	// itself, as the boot figures are stated.
	stagesOut := os.Getenv("KUBEFARM_BOOT_STAGES_OUT")
	whole := t
	powerOns := make([]time.Time, len(vms))
	powerUp := func(t *testing.T, i int) {
		if vms[i].redfish != nil {
			powerOns[i] = redfishPowerOn(t, ctx, c, vms[i], client.ObjectKey{Namespace: ns.Name, Name: pool.Name + "-" + vms[i].Name})
			return
		}
		powerOns[i] = time.Now()
		vms[i].powerOn(t)
	}
	if stagesOut == "" {
		// The catch-all machine first: the Redfish one waits for its
		// Machine and the plugin.
		for i := len(vms) - 1; i >= 0; i-- {
			powerUp(t, i)
		}
	}
	powerOn := time.Now()
	story := func() string { return machineStory(ctx, cs, c, machineKey, powerOn) }

	vmNodes := make([]*corev1.Node, len(vms))
	t.Run("the machines join and their Nodes are Ready", func(t *testing.T) {
		for i, vm := range vms {
			if stagesOut != "" {
				// The whole test's t: the machines outlive this step.
				powerUp(whole, i)
			}
			if i == 0 {
				powerOn = powerOns[0]
			}
			err := pollErr(ctx, 15*time.Minute, func(ctx context.Context) (bool, error) {
				if err := vm.exited(); err != nil {
					return false, err
				}
				n, err := tenant.CoreV1().Nodes().Get(ctx, vm.Name, metav1.GetOptions{})
				if err != nil {
					return false, nil
				}
				vmNodes[i] = n
				return cluster.NodeReady(n), nil
			})
			if err != nil {
				t.Fatalf("node %s never became Ready: %v%s", vm.Name, err,
					machineStory(ctx, cs, c, client.ObjectKey{Namespace: ns.Name, Name: pool.Name + "-" + vm.Name}, powerOns[i]))
			}
			t.Logf("Node %s (%s) Ready %.0f s after power-on", vm.Name, vm.how(), time.Since(powerOns[i]).Seconds())
		}
	})
	if t.Failed() {
		return
	}

	t.Run("the Redfish machine's Machine shows its power; the catch-all machine has a Machine named from its MAC", func(t *testing.T) {
		checkJoinMachines(t, ctx, c, pool, vms)
	})
	if t.Failed() {
		return
	}

	t.Run("the serving CSR was approved by kubefarm-manager", func(t *testing.T) {
		var csrs *certificatesv1.CertificateSigningRequestList
		err := pollErr(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
			csrs, err = tenant.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, r := range csrs.Items {
				if r.Spec.SignerName == certificatesv1.KubeletServingSignerName && r.Spec.Username == "system:node:"+hostname {
					for _, cond := range r.Status.Conditions {
						if cond.Type == certificatesv1.CertificateApproved && cond.Reason == "KubefarmMachineVerified" {
							return len(r.Status.Certificate) > 0, nil
						}
					}
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("no approved and issued kubelet-serving CSR of system:node:%s: %v%s", hostname, err, story())
		}
	})

	t.Run("the network taint is lifted for the boot the node runs", func(t *testing.T) {
		m, _ := checkMachineBoot(t, ctx, c, tenant, machineKey, hostname, img, story)
		t.Logf("Machine %s: boot %s, image %s", machineKey, m.Status.LastBoot.BootID, m.Status.LastBoot.ImageDigest)
	})
	if t.Failed() {
		return
	}

	// From here on the host rejects any direct connection to the node's
	// kubelet: the tenant's API server pods (in the admin cluster's pod
	// network, forwarded by the host) and the host itself.
	// Its data address (the kubelet's InternalIP) is not on the host's
	// networks at all; rejected too, should a route to it ever appear.
	for _, chain := range []string{"FORWARD", "OUTPUT"} {
		for _, dst := range []string{ip, dataAddress(t, ip)} {
			rule := []string{chain, "-d", dst, "-p", "tcp", "--dport", "10250", "-j", "REJECT"}
			netnstest.Run(t, "iptables", append([]string{"-I"}, rule...)...)
			t.Cleanup(func() { _ = exec.Command("iptables", append([]string{"-D"}, rule...)...).Run() })
		}
	}

	t.Run("a pod on the node reaches a ClusterIP Service; logs and exec go through Konnectivity", func(t *testing.T) {
		web := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{NodeName: hostname, Containers: []corev1.Container{{
				Name: "httpd", Image: cluster.BusyboxImage,
				// The e2e busybox image is /bin/busybox alone: applets by
				// their full invocation.
				Command: []string{"/bin/busybox", "sh", "-c", "/bin/busybox mkdir -p /srv && echo served-by-kubefarm-node > /srv/index.html && echo web-up && exec /bin/busybox httpd -f -p 8080 -h /srv"},
			}}},
		}
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		}
		clientPod := testPod("client")
		clientPod.Spec.NodeName = hostname
		clientPod.Spec.Containers[0].Command = []string{"/bin/busybox", "sleep", "3600"}
		pods := tenant.CoreV1().Pods("default")
		if _, err := pods.Create(ctx, web, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		s, err := tenant.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pods.Create(ctx, clientPod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"web", "client"} {
			var p *corev1.Pod
			err := pollErr(ctx, 8*time.Minute, func(ctx context.Context) (bool, error) {
				got, err := pods.Get(ctx, name, metav1.GetOptions{})
				if err == nil {
					p = got
				}
				return err == nil && podReady(p), nil
			})
			if err != nil {
				var status any
				if p != nil {
					status = p.Status
				}
				t.Fatalf("pod %s never ran on %s: %v; status %+v%s", name, hostname, err, status, story())
			}
		}

		// logs: kubelet's /containerLogs, reached by the API server through
		// the node's Konnectivity agent, which on a node that has just
		// joined can start minutes after the test's pods: its image is
		// bigger than theirs and pulled alongside kube-proxy's and CoreDNS's
		// (2m35s in one CI run, past this step's wait for the logs).
		var agentErr error
		if err := pollErr(ctx, 8*time.Minute, func(ctx context.Context) (bool, error) {
			_, agentErr = addonPod(ctx, tenant, konnectivityAgentSelector, hostname)
			return agentErr == nil, nil
		}); err != nil {
			t.Fatalf("the Konnectivity agent never became Ready on %s: %v (%v)%s", hostname, err, agentErr, story())
		}
		var logs []byte
		var logsErr error
		err = pollErr(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
			logs, logsErr = pods.GetLogs("web", &corev1.PodLogOptions{}).DoRaw(ctx)
			return logsErr == nil && bytes.Contains(logs, []byte("web-up")), nil
		})
		if err != nil {
			t.Fatalf("kubectl logs web: %v (last answer %q, %v)", err, logs, logsErr)
		}

		// exec: an HTTP GET of the ClusterIP from the other pod, through
		// kube-proxy's rules on the node. Those exist once kube-proxy runs
		// there, which on a node that has just joined can come after the
		// test's own pods (its image is pulled like theirs).
		var proxyErr error
		if err := pollErr(ctx, 5*time.Minute, func(ctx context.Context) (bool, error) {
			_, proxyErr = kubeProxyPod(ctx, tenant, hostname)
			return proxyErr == nil, nil
		}); err != nil {
			t.Fatalf("kube-proxy never became Ready on %s: %v (%v)%s", hostname, err, proxyErr, story())
		}
		out, err := getFromClient(ctx, tenantCfg, tenant, s.Spec.ClusterIP)
		if err != nil {
			t.Fatalf("%v\n%s", err, kubeProxyState(ctx, tenantCfg, tenant, []string{hostname}))
		}
		t.Logf("through Konnectivity: logs %q; exec GET of ClusterIP %s gave %q", strings.TrimSpace(string(logs)), s.Spec.ClusterIP, lastLine(out))

		// kubernetes.default: with a NodePort API server Service its
		// endpoints are the node address and node port nodes use (kube-
		// apiserver alone would publish the node address on port 6443),
		// and from the pod its ClusterIP reaches a TLS server: an HTTP
		// request gets TLS's plain-text refusal back.
		slice, err := tenant.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		host, port := endpointHostPort(t, got.Status.Endpoint)
		if len(slice.Endpoints) != 1 || len(slice.Endpoints[0].Addresses) != 1 || slice.Endpoints[0].Addresses[0] != host ||
			len(slice.Ports) != 1 || slice.Ports[0].Port == nil || *slice.Ports[0].Port != port {
			t.Fatalf("EndpointSlice default/kubernetes %+v %+v, want %s:%d (the TenantCluster's endpoint)", slice.Endpoints, slice.Ports, host, port)
		}
		kube, err := tenant.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hello := "printf 'GET /version HTTP/1.0\\r\\n\\r\\n' | /bin/busybox nc -w 5 " + kube.Spec.ClusterIP + " 443"
		var execErr error
		err = pollErr(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
			out, execErr = cluster.ExecIn(ctx, tenantCfg, tenant, "default", "client", []string{"/bin/busybox", "sh", "-c", hello})
			return execErr == nil && strings.Contains(out, "HTTPS server"), nil
		})
		if err != nil {
			t.Fatalf("exec %q in pod client: %v (last: %v, output %q)", hello, err, execErr, out)
		}
		t.Logf("kubernetes.default (%s:443) -> %s:%d answered %q", kube.Spec.ClusterIP, host, port, lastLine(out))
	})

	// Cluster DNS (#27): the tenant's CoreDNS, from the e2e registry like
	// every image, runs on the netbooted nodes, and a pod on each node
	// resolves Service names through the kubelet's clusterDNS (kube-dns's
	// ClusterIP, so kube-proxy's rules too) to their ClusterIPs.
	t.Run("CoreDNS is Ready and a pod on each node resolves Services to their ClusterIPs", func(t *testing.T) {
		checkClusterDNS(ctx, t, tenantCfg, tenant, nodes)
	})

	// The node image's containerd, built from its module (the manifest
	// names its version); the CRI reports it without the v.
	t.Run("each Node reports the image's containerd as its container runtime", func(t *testing.T) {
		want := "containerd://" + strings.TrimPrefix(art.Manifest.Containerd, "v")
		if art.Manifest.Containerd == "" {
			t.Fatalf("the node image's manifest names no containerd version")
		}
		for _, n := range nodes {
			node, err := tenant.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rt := node.Status.NodeInfo.ContainerRuntimeVersion
			t.Logf("Node %s: containerRuntimeVersion %q, kubelet %s", n, rt, node.Status.NodeInfo.KubeletVersion)
			if rt != want {
				t.Errorf("Node %s status.nodeInfo.containerRuntimeVersion is %q, want %q (the node image's manifest)", n, rt, want)
			}
		}
	})

	// Node identity (docs/security.md): the pod client runs on node 1.
	t.Run("node identity: a tenant's pod and root on a node cannot act as another node", func(t *testing.T) {
		checkNodeIdentity(ctx, t, identityTarget{tenantCfg: tenantCfg, tenant: tenant,
			server: fmt.Sprintf("%s:%d", serverIP, cluster.PXEHTTPPort), node1: vms[0], node2: vms[1]})
	})

	// make demo's own check of its workload, so that the demo cannot rot
	// unseen: the same code, on these two machines, one BIOS and one UEFI.
	t.Run("a pod on each node reaches the other over the pod network; a ClusterIP Service answers from both (make demo's check)", func(t *testing.T) {
		if err := cluster.CheckSpread(ctx, tenantCfg, tenant, "spread", nodes, t.Logf); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("server network: the nodes are on the pool's VLAN; one bonded port's cable pulled, the node stays Ready and pods still reach each other", func(t *testing.T) {
		bootIPs := map[string]string{}
		for _, vm := range vms {
			bootIPs[vm.Name] = vm.IP
		}
		checkServerNetwork(ctx, t, serverNetworkTarget{cfg: tenantCfg, tenant: tenant, bonded: vms[0], bootIPs: bootIPs,
			admin: c, namespace: pool.Namespace})
	})

	t.Run("the Machine's Events tell the boot story", func(t *testing.T) {
		events := machineEvents(ctx, cs, machineKey)
		seen := map[string]bool{}
		for _, e := range events {
			seen[e.reason] = true
		}
		for _, want := range []string{"Offered", "Acked", "ScriptServed", "ImageServed", "ConfigServed", "BootReported", "KubefarmMachineVerified", "NetworkTaintLifted"} {
			if !seen[want] {
				t.Errorf("no %s Event on Machine %s", want, machineKey)
			}
		}
		t.Logf("boot stages, seconds after power-on:%s", story())
		var report []machineStages
		for i, vm := range vms {
			key := client.ObjectKey{Namespace: ns.Name, Name: pool.Name + "-" + vm.Name}
			n, err := tenant.CoreV1().Nodes().Get(ctx, vm.Name, metav1.GetOptions{})
			if err != nil {
				n = vmNodes[i]
			}
			var evs []cluster.BootEvent
			for _, e := range machineEvents(ctx, cs, key) {
				evs = append(evs, cluster.BootEvent{At: e.at, Reason: e.reason, Message: e.message})
			}
			st := cluster.BootStages(evs, n, powerOns[i])
			t.Logf("%s (%s), power-on to each stage:\n%s", vm.Name, vm.Firmware(), cluster.StageTable(st))
			if stagesOut != "" {
				// Where the node's own boot spends its time, for the bench.
				t.Logf("%s, systemd's critical chains:%s", vm.Name, nodeShell(ctx, tenantCfg, tenant, vm.Name,
					"systemd-analyze critical-chain --no-pager kubefarm-agent.service kubelet.service; systemd-analyze blame --no-pager | head -n 25"))
			}
			report = append(report, machineStages{Machine: vm.Name, Firmware: vm.Firmware(), PowerOn: powerOns[i].UTC(), Stages: st})
		}
		if stagesOut != "" {
			writeStages(t, stagesOut, report)
		}
	})

	// kube-proxy's ipvs mode on nodes that boot with it: switched before
	// the rollout (the pool loads the IPVS modules at boot), so that the
	// rolled nodes start with no other mode's rules (docs/kube-proxy.md).
	t.Run("kube-proxy switches to ipvs ahead of the reboot-to-update", func(t *testing.T) {
		switchKubeProxyMode(t, ctx, kubeconfig, release, ns.Name, vals, tenantCfg, tenant, nodes, "ipvs")
	})

	// The cluster CA's rotation rides on the rollout's reboots: its
	// clients move first, then both machines are asked to reboot, which
	// the rollout below does anyway, and its servers move once both
	// rebooted. The pool's rollout is paused meanwhile, so that it does
	// not reboot them for the rotation into the old image and then again
	// for the new one: one reboot serves both. The tenant clients of the
	// rest of the scenario are the admin kubeconfig as the rotation
	// leaves it.
	poolKey := client.ObjectKeyFromObject(pool)
	t.Run("the cluster CA rotation moves the clients to a new CA and asks both machines to reboot", func(t *testing.T) {
		if err := setPoolPaused(ctx, c, poolKey, true); err != nil {
			t.Fatal(err)
		}
		tenantCfg = startClusterCARotation(t, ctx, c, cs, key, tenantCfg)
		if tenant, err = kubernetes.NewForConfig(tenantCfg); err != nil {
			t.Fatal(err)
		}
	})
	if t.Failed() {
		return
	}

	var secondImage string
	outer := t
	t.Run("a rolling reboot-to-update moves both machines to a new image within the budget and the PDB", func(t *testing.T) {
		secondImage = testRollout(t, ctx, rolloutScenario{
			c: c, cs: cs, tenant: tenant, tenantCfg: tenantCfg, pool: pool, vms: vms, imgDir: imgDir, repo: repo, oldImage: img,
			cleanup: outer.Cleanup,
			switchImage: func(ctx context.Context, bootImage string) error {
				if err := upgradeChangesOnly(ctx, t, c, kubeconfig, release, ns.Name, vals, bootImage); err != nil {
					return err
				}
				// Paused for the cluster CA's rotation (above) until now.
				if err := setPoolPaused(ctx, c, poolKey, false); err != nil {
					return err
				}
				// Later upgrades (kube-proxy's mode) keep the pool on it:
				// values that still named the old image would roll the
				// pool back, as they would for an operator.
				vals["bootImage"] = bootImage
				return nil
			},
		})
	})
	t.Run("the cluster CA rotation ends once both machines rebooted: the servers move, the old CA is dropped", func(t *testing.T) {
		tenantCfg = finishClusterCARotation(t, ctx, c, cs, key, tenantCfg)
		if tenant, err = kubernetes.NewForConfig(tenantCfg); err != nil {
			t.Fatal(err)
		}
	})
	// After the join and the rollout, the controllers have written all they
	// write: what ArgoCD would compare now must not differ from the render.
	dumpForArgoDiff(ctx, t, c, kubeconfig, release, ns.Name)
	if t.Failed() {
		return
	}

	t.Run("in ipvs mode a new Service's ClusterIP answers from both rebooted nodes", func(t *testing.T) {
		waitKubeProxyMode(t, ctx, tenantCfg, tenant, nodes, "ipvs")
		checkProxyMode(t, ctx, tenantCfg, tenant, nodes, "ipvs")
	})
	t.Run("switched live to nftables, a new Service's ClusterIP answers from both nodes", func(t *testing.T) {
		switchKubeProxyMode(t, ctx, kubeconfig, release, ns.Name, vals, tenantCfg, tenant, nodes, "nftables")
		checkProxyMode(t, ctx, tenantCfg, tenant, nodes, "nftables")
	})

	// The join credential is handed out once, to the machine's leased IP,
	// for its MAC, with the secret of its boot, inside that boot's window:
	// from anywhere else, without the secret, or again,
	// kubefarm-pxe answers 403 and the Machine gets a Refused Event.
	t.Run("/config refuses the wrong IP, an unknown MAC and a request without the boot's secret", func(t *testing.T) {
		base := fmt.Sprintf("http://%s:%d/config/", serverIP, cluster.PXEHTTPPort)
		for _, tc := range []struct{ what, url string }{
			{"the machine's MAC from the host's address " + serverIP, base + mac},
			{"an unknown MAC", base + "52:54:00:7b:00:ee"},
		} {
			if code := httpStatus(t, "", tc.url); code != 403 {
				t.Errorf("GET /config for %s: HTTP %d, want 403", tc.what, code)
			}
		}
		// Power the machine off, then ask from its MAC and IP: without the
		// boot's secret nothing is served, whatever the address.
		vms[0].pullPlug(t)
		cl := bootClient(t, mac)
		netnstest.Run(t, "ip", "-n", cl, "addr", "add", ip+"/24", "dev", "eth0")
		if code := httpStatus(t, cl, base+mac); code != 403 {
			t.Errorf("GET /config from the machine's own IP and MAC after its boot: HTTP %d, want 403", code)
		}
		err := pollErr(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			var wrongIP, noSecret bool
			for _, e := range machineEvents(ctx, cs, machineKey) {
				if e.reason == "Refused" {
					wrongIP = wrongIP || strings.Contains(e.message, "not from the machine's leased IP")
					noSecret = noSecret || strings.Contains(e.message, "no valid boot secret")
				}
			}
			return wrongIP && noSecret, nil
		})
		if err != nil {
			t.Errorf("no Refused Events for the wrong IP and the replay on Machine %s:%s", machineKey, story())
		}
	})

	// Last, with the first machine off (docs/discovery.md, docs/power.md).
	t.Run("an unknown machine powered on through IPMI is discovered, enrolled with the plugin and joins; hung in a rollout it is power-cycled; removed, it is powered off", func(t *testing.T) {
		testDiscovery(t, discoveryScenario{c: c, cs: cs, tenant: tenant, tenantCfg: tenantCfg, pool: pool, kubeconfig: kubeconfig,
			bootImage: img.Name, nextImage: secondImage})
	})
}

// httpStatus GETs url, from inside network namespace netns when it is not
// empty (curl, as a machine's own tools would), and returns the status.
func httpStatus(t *testing.T, netns, url string) int {
	t.Helper()
	args := []string{"curl", "-s", "-o", "/dev/null", "-m", "10", "-w", "%{http_code}", url}
	if netns != "" {
		args = append([]string{"ip", "netns", "exec", netns}, args...)
	}
	out, err := exec.Command(args[0], args[1:]...).Output()
	if err != nil {
		t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
	var code int
	if _, err := fmt.Sscanf(string(out), "%d", &code); err != nil {
		t.Fatalf("%s printed %q", strings.Join(args, " "), out)
	}
	return code
}

// machineStages is one machine's boot in make bench-node's bench-node.json.
type machineStages struct {
	Machine  string              `json:"machine"`
	Firmware string              `json:"firmware"`
	PowerOn  time.Time           `json:"powerOn"`
	Stages   []cluster.BootStage `json:"stages"`
}

// writeStages writes each machine's boot stages (cluster.BootStages) as
// JSON, for make bench-node.

func writeStages(t *testing.T, path string, report []machineStages) {
	t.Helper()
	b, err := json.MarshalIndent(map[string]any{"machines": report}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Errorf("writing the boot stages: %v", err)
	}
}

// stageEvent is one Event of the Machine.
type stageEvent struct {
	at      time.Time
	reason  string
	message string
}

// machineEvents lists the Machine's Events (core and events.k8s.io
// writers alike), oldest first.
func machineEvents(ctx context.Context, cs kubernetes.Interface, key client.ObjectKey) []stageEvent {
	list, err := cs.CoreV1().Events(key.Namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.kind": "Machine", "involvedObject.name": key.Name,
	}.String()})
	if err != nil {
		return nil
	}
	var out []stageEvent
	for _, e := range list.Items {
		at := e.EventTime.Time
		if at.IsZero() {
			at = e.FirstTimestamp.Time
		}
		out = append(out, stageEvent{at: at, reason: e.Reason, message: e.Message})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

// checkMachineBoot waits for the Machine key to show a boot with
// NetworkVerified and NodeReady and for its Node (nodeName) to have lost
// the network taint, then requires the Machine's last boot to be the one
// the Node runs, of img's root filesystem. It returns both as last read.
func checkMachineBoot(t *testing.T, ctx context.Context, c client.Client, tenant kubernetes.Interface, key client.ObjectKey, nodeName string,
	img *kubefarmv1.BootImage, story func() string) (*kubefarmv1.Machine, *corev1.Node) {
	t.Helper()
	m := &kubefarmv1.Machine{}
	var node *corev1.Node
	err := pollErr(ctx, 5*time.Minute, func(ctx context.Context) (bool, error) {
		n, err := tenant.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil || c.Get(ctx, key, m) != nil {
			return false, nil
		}
		node = n
		for _, tt := range n.Spec.Taints {
			if tt.Key == "kubefarm.io/network-unavailable" {
				return false, nil
			}
		}
		return m.Status.LastBoot != nil && meta.IsStatusConditionTrue(m.Status.Conditions, kubefarmv1.ConditionNetworkVerified) &&
			meta.IsStatusConditionTrue(m.Status.Conditions, kubefarmv1.ConditionNodeReady), nil
	})
	if err != nil {
		t.Fatalf("the taint was not lifted, or the Machine lacks NetworkVerified and NodeReady: %v%s", err, story())
	}
	if m.Status.LastBoot.BootID != node.Status.NodeInfo.BootID {
		t.Errorf("Machine lastBoot.bootID %s, the Node runs boot %s", m.Status.LastBoot.BootID, node.Status.NodeInfo.BootID)
	}
	if m.Status.LastBoot.ImageDigest != img.Spec.Rootfs.Digest {
		t.Errorf("Machine lastBoot.imageDigest %s, the BootImage's rootfs is %s", m.Status.LastBoot.ImageDigest, img.Spec.Rootfs.Digest)
	}
	return m, node
}

// machineStory prints the Machine's Events and conditions relative to
// power-on: the boot's stages, and what is missing when a step fails.
func machineStory(ctx context.Context, cs kubernetes.Interface, c client.Client, key client.ObjectKey, powerOn time.Time) string {
	var b strings.Builder
	for _, e := range machineEvents(ctx, cs, key) {
		fmt.Fprintf(&b, "\n  %6.1f s  %-24s %s", e.at.Sub(powerOn).Seconds(), e.reason, e.message)
	}
	m := &kubefarmv1.Machine{}
	if err := c.Get(ctx, key, m); err == nil {
		for _, cond := range m.Status.Conditions {
			fmt.Fprintf(&b, "\n  %6.1f s  condition %s=%s (%s) %s", cond.LastTransitionTime.Sub(powerOn).Seconds(), cond.Type, cond.Status, cond.Reason, cond.Message)
		}
	}
	return b.String()
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// endpointHostPort splits a TenantCluster's status.endpoint.
func endpointHostPort(t *testing.T, endpoint string) (string, int32) {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatalf("status.endpoint %q: %v", endpoint, err)
	}
	port, err := strconv.ParseUint(u.Port(), 10, 16)
	if err != nil {
		t.Fatalf("status.endpoint %q: %v", endpoint, err)
	}
	return u.Hostname(), int32(port)
}

// getFromClient GETs /index.html from ip:80 in the pod default/client until
// the web pod's page comes back (written through nc: busybox's static wget
// crashes in glibc's static NSS); it returns the answer.
func getFromClient(ctx context.Context, cfg *rest.Config, tenant kubernetes.Interface, ip string) (string, error) {
	var out string
	var execErr error
	get := "printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | /bin/busybox nc -w 5 " + ip + " 80"
	err := pollErr(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
		out, execErr = cluster.ExecIn(ctx, cfg, tenant, "default", "client", []string{"/bin/busybox", "sh", "-c", get})
		return execErr == nil && strings.Contains(out, "served-by-kubefarm-node"), nil
	})
	if err != nil {
		return out, fmt.Errorf("exec %q in pod client: %v (last: %v, output %q)", get, err, execErr, out)
	}
	return out, nil
}

// checkClusterDNS waits for the tenant's CoreDNS Deployment to be fully
// Ready, then, from a pod of its own on each of nodes, looks up the web
// Service (made by the ClusterIP step) and kubernetes.default by their
// full names with busybox's nslookup, which asks the pod's resolv.conf
// nameserver: the kubelet's clusterDNS, the kube-dns ClusterIP. Each must
// answer with exactly the Service's ClusterIP.
func checkClusterDNS(ctx context.Context, t *testing.T, cfg *rest.Config, tenant kubernetes.Interface, nodes []string) {
	t.Helper()
	var dep *appsv1.Deployment
	err := pollErr(ctx, 5*time.Minute, func(ctx context.Context) (bool, error) {
		d, err := tenant.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		dep = d
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want &&
			d.Status.ReadyReplicas == want && d.Status.Replicas == want, nil
	})
	dnsPods, listErr := tenant.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil {
		var status any
		if dep != nil {
			status = dep.Status
		}
		story := coreDNSPodsStory(ctx, tenant, dnsPods, listErr)
		for _, n := range nodes {
			story += nodeNetworkStory(ctx, cfg, tenant, n)
		}
		t.Fatalf("Deployment kube-system/coredns never had all its replicas Ready: %v; status %+v%s", err, status, story)
	}
	if listErr != nil {
		t.Fatal(listErr)
	}
	for _, p := range dnsPods.Items {
		var image string
		if len(p.Spec.Containers) > 0 {
			image = p.Spec.Containers[0].Image
		}
		t.Logf("CoreDNS pod %s on %s, %s, image %s", p.Name, p.Spec.NodeName, p.Status.Phase, image)
	}

	want := map[string]string{}
	for _, svc := range []string{"web", "kubernetes"} {
		s, err := tenant.CoreV1().Services("default").Get(ctx, svc, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Service default/%s: %v", svc, err)
		}
		want[svc+".default.svc.cluster.local"] = s.Spec.ClusterIP
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)

	pods := tenant.CoreV1().Pods("default")
	var grace int64
	for _, node := range nodes {
		p := testPod("dns-" + node)
		p.Spec.NodeName = node
		p.Spec.TerminationGracePeriodSeconds = &grace
		p.Spec.Containers[0].Command = []string{"/bin/busybox", "sleep", "3600"}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		// Gone again before the later steps drain the nodes.
		defer func() {
			_ = pods.Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		}()
	}
	for _, node := range nodes {
		podName := "dns-" + node
		var last *corev1.Pod
		err := pollErr(ctx, 8*time.Minute, func(ctx context.Context) (bool, error) {
			p, err := pods.Get(ctx, podName, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last = p
			return podReady(p), nil
		})
		if err != nil {
			var status any
			if last != nil {
				status = last.Status
			}
			t.Fatalf("pod %s never ran on %s: %v; status %+v", podName, node, err, status)
		}
		for _, name := range names {
			cmd := []string{"/bin/busybox", "nslookup", name}
			var out string
			var execErr error
			err := pollErr(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
				out, execErr = cluster.ExecIn(ctx, cfg, tenant, "default", podName, cmd)
				got := cluster.NslookupAnswers(out)
				return execErr == nil && len(got) == 1 && got[0] == want[name], nil
			})
			if err != nil {
				resolv, _ := cluster.ExecIn(ctx, cfg, tenant, "default", podName, []string{"/bin/busybox", "cat", "/etc/resolv.conf"})
				// What CoreDNS said meanwhile (a run once resolved kubernetes.default
				// and then nothing for web.default for the whole wait), and what
				// each replica answers when asked directly, past the Service.
				t.Fatalf("nslookup %s in pod %s on %s: %v; want exactly %s, got %q (last: %v, output %q); the pod's resolv.conf:\n%s\neach CoreDNS pod asked directly:%s\nthe CoreDNS pods:%s",
					name, podName, node, err, want[name], cluster.NslookupAnswers(out), execErr, out, resolv,
					askEachCoreDNS(ctx, cfg, tenant, podName, name, dnsPods), coreDNSPodsStory(ctx, tenant, dnsPods, nil))
			}
			t.Logf("on %s: %s -> %s", node, name, want[name])
		}
	}
}

// askEachCoreDNS is what every CoreDNS pod answers for name when pod asks
// it at its pod IP, for a failure message: a replica that answers what the
// Service does not (or nothing) tells a stale replica from a broken path.
func askEachCoreDNS(ctx context.Context, cfg *rest.Config, tenant kubernetes.Interface, pod, name string, dnsPods *corev1.PodList) string {
	var b strings.Builder
	for _, p := range dnsPods.Items {
		askCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := cluster.ExecIn(askCtx, cfg, tenant, "default", pod, []string{"/bin/busybox", "nslookup", name, p.Status.PodIP})
		cancel()
		fmt.Fprintf(&b, "\n  %s (%s): answers %q, error %v, output %q", p.Name, p.Status.PodIP, cluster.NslookupAnswers(out), err, out)
	}
	return b.String()
}

// coreDNSPodsStory is why CoreDNS is not Ready, for a failure message: each
// pod's node and problem (as make demo's last check words it) and its last
// log lines, of the previous container when it restarted (a CoreDNS that
// exits at start, e.g. on a Corefile its plugins refuse, says why there).
func coreDNSPodsStory(ctx context.Context, tenant kubernetes.Interface, pods *corev1.PodList, listErr error) string {
	if listErr != nil {
		return fmt.Sprintf("\nlisting the CoreDNS pods: %v", listErr)
	}
	var b strings.Builder
	tail := int64(20)
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "\npod kube-system/%s on %q: %s %s", p.Name, p.Spec.NodeName, p.Status.Phase, cluster.PodProblem(&p))
		opts := &corev1.PodLogOptions{Container: "coredns", TailLines: &tail}
		for _, s := range p.Status.ContainerStatuses {
			if s.Name == "coredns" && s.RestartCount > 0 {
				opts.Previous = true
			}
		}
		logs, err := tenant.CoreV1().Pods("kube-system").GetLogs(p.Name, opts).DoRaw(ctx)
		if err != nil {
			fmt.Fprintf(&b, "\n  (logs: %v)", err)
			continue
		}
		fmt.Fprintf(&b, "\n  %s", strings.ReplaceAll(strings.TrimSpace(string(logs)), "\n", "\n  "))
	}
	return b.String()
}

// nodeNetworkStory tells how a node's own name resolution is set up, for a
// failed DNS step: networkd's links and the boot NIC's lease, resolved's
// servers, the resolv.conf the kubelet hands to pods with dnsPolicy Default
// (CoreDNS's upstreams) and the sandboxes' copies, and the journal of
// networkd, resolved and udevd. It runs them on the node as root, from a
// privileged pod in the host's namespaces, and never fails the caller.
func nodeNetworkStory(ctx context.Context, cfg *rest.Config, tenant kubernetes.Interface, node string) string {
	script := `ip -br link; ip -br addr; echo '--- networkctl'; networkctl --no-pager list; networkctl --no-pager status -a -n 0;
echo '--- resolvectl'; resolvectl --no-pager status; echo '--- /etc/resolv.conf'; ls -l /etc/resolv.conf; cat /etc/resolv.conf;
echo '--- sandboxes'; for f in /var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/*/resolv.conf; do echo "$f:"; cat "$f"; done;
echo '--- journal'; journalctl -b --no-pager -o short-monotonic -u systemd-networkd -u systemd-resolved -u systemd-udevd | tail -n 120`
	return fmt.Sprintf("\nnode %s, its network as networkd and resolved see it:%s", node, nodeShell(ctx, cfg, tenant, node, script))
}

// nodeShell runs script on node as root, in the host's namespaces, from a
// privileged pod, and returns what it printed, indented; it never fails the
// caller.
func nodeShell(ctx context.Context, cfg *rest.Config, tenant kubernetes.Interface, node, script string) string {
	// A namespace of its own that Pod Security lets run privileged pods
	// (the tenant enforces its level everywhere else).
	const ns = "node-netstory"
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
	if _, err := tenant.CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Sprintf("\nnode %s: no namespace for a shell pod: %v", node, err)
	}
	name := "netstory-" + node
	priv := true
	var grace int64
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, HostNetwork: true, HostPID: true, TerminationGracePeriodSeconds: &grace,
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "shell", Image: cluster.BusyboxImage,
				Command:         []string{"/bin/busybox", "sleep", "3600"},
				SecurityContext: &corev1.SecurityContext{Privileged: &priv}}}},
	}
	pods := tenant.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Sprintf("\nnode %s: no shell pod: %v", node, err)
	}
	defer func() { _ = pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &grace}) }()
	if err := pollErr(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		return err == nil && podReady(p), nil
	}); err != nil {
		return fmt.Sprintf("\nnode %s: the shell pod never ran: %v", node, err)
	}
	out, err := cluster.ExecIn(ctx, cfg, tenant, ns, name, []string{"/bin/busybox", "nsenter", "-t", "1", "-m", "-u", "-n", "-i", "--", "/bin/sh", "-c", script})
	if err != nil {
		out += fmt.Sprintf("\n(exec: %v)", err)
	}
	return "\n  " + strings.ReplaceAll(strings.TrimSpace(out), "\n", "\n  ")
}

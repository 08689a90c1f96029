package bootchain

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/insomniacslk/dhcp/dhcpv4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/testing/netnstest"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// NICModules are the drivers of the virtual NICs the test uses: e1000 for
// the BIOS machine, virtio-net for the UEFI one (OVMF drives virtio-net
// itself; it has no e1000 driver).
var NICModules = []string{"e1000", "virtio_pci", "virtio_net"}

// The boot network inside the namespace.
const (
	bridge   = "kfbr0"
	serverIP = "10.77.0.1"
	subnet   = "10.77.0.0/24"
	httpPort = 8080
	// metricsPort is kubefarm-pxe's /healthz and /metrics (--metrics-addr),
	// on serverIP here so that the test can reach it.
	metricsPort = 9090
	ipxeDir     = "/usr/lib/ipxe"
	ovmf        = "/usr/share/ovmf/OVMF.fd"
)

// vm is one virtual machine of the test and how it boots.
type vm struct {
	name, mac, ip string
	uefi          bool
}

var (
	biosVM = vm{name: "bios", mac: "52:54:00:77:00:11", ip: "10.77.0.11"}
	uefiVM = vm{name: "uefi", mac: "52:54:00:77:00:12", ip: "10.77.0.12", uefi: true}
	// misplacedVM is an x86 UEFI machine listed in a pool of arm64 images.
	misplacedVM = vm{name: "misplaced", mac: "52:54:00:77:00:13", ip: "10.77.0.13", uefi: true}
)

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// requireFacility skips, loudly, when this machine cannot run the test at
// all: not root, or no qemu. Everything else missing is a failure.
func requireFacility(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED, NOT PASSED: the boot chain test needs root (network namespaces, tap devices)")
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("SKIPPED, NOT PASSED: qemu-system-x86_64 is not installed (apt-get install -y qemu-system-x86 ipxe-qemu ovmf)")
	}
	for _, f := range []string{filepath.Join(ipxeDir, "ipxe.efi"), "/usr/lib/ipxe/qemu/efi-e1000.rom", ovmf, DefaultBusybox} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s is missing: install the Debian packages ipxe, ipxe-qemu, ovmf and busybox-static", f)
		}
	}
	if err := CheckStatic(DefaultBusybox); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Fatalf("/dev/net/tun: %v", err)
	}
}

// chain is the running server side: API server, kubefarm-pxe in the
// namespace, the boot image.
type chain struct {
	ns        string
	env       *testenv.Env
	namespace string
	image     *kubefarmv1.BootImage
	armImage  *kubefarmv1.BootImage
	kernelLen int
	initrdLen int
	http      *http.Client
	serverLog *netnstest.LockedBuffer
}

// TestBootChain boots virtual machines from kubefarm-pxe: see doc.go.
func TestBootChain(t *testing.T) {
	requireFacility(t)
	// The watch client logs through controller-runtime; nothing to say here.
	ctrllog.SetLogger(logr.Discard())
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}

	// The kernel (cached) and the initrd.
	pkg, err := KernelPackage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k, err := FetchKernel(ctx, filepath.Join(root, "_build", "bootchain-cache"), pkg, NICModules)
	if err != nil {
		t.Fatal(err)
	}
	kernel, err := os.ReadFile(k.Vmlinuz)
	if err != nil {
		t.Fatal(err)
	}
	var initrdBuf bytes.Buffer
	if err := BuildInitrd(&initrdBuf, DefaultBusybox, k.Modules); err != nil {
		t.Fatal(err)
	}
	initrd := initrdBuf.Bytes()
	// The initrd never mounts a root file system, but a BootImage has one
	// and kubefarm-pxe caches it before serving the script.
	rootfs := []byte("kubefarm bootchain test: a root file system the initrd does not mount\n")
	t.Logf("kernel %s (%s, %d bytes), initrd %d bytes with %d modules", k.Package, k.Release, len(kernel), len(initrd), len(k.Modules))

	// The binary first: building is the heaviest step, better before the
	// API server starts competing for the two cores.
	binary := netnstest.BuildPXE(ctx, t)
	t.Logf("prepared kernel, initrd and binary in %s", time.Since(start).Round(time.Millisecond))

	ns := netnstest.New(t, "kfboot")
	netnstest.Bridge(t, ns, bridge, serverIP+"/24")

	env := testenv.StartT(t, testenv.Options{})
	c := &chain{ns: ns, env: env, kernelLen: len(kernel), initrdLen: len(initrd), http: netnstest.HTTPClient(ns)}

	// The artifact origin, listening inside the namespace where
	// kubefarm-pxe can reach it: on 127.0.0.2, which --fetch-allowed-cidrs
	// opens (127.0.0.1 is where it reaches the API server, which artifact
	// fetches never connect to).
	blobs := map[string][]byte{"/" + sha(kernel): kernel, "/" + sha(initrd): initrd, "/" + sha(rootfs): rootfs}
	originLn := netnstest.Listen(t, ns, "127.0.0.2:0")
	netnstest.ServeBlobs(t, originLn, blobs)
	originURL := "http://" + originLn.Addr().String()

	// The API server listens on the host's loopback; kubefarm-pxe reaches
	// it through a forwarder listening on the namespace's.
	apiURL, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	apiLn := netnstest.Listen(t, ns, "127.0.0.1:0")
	netnstest.Forward(t, apiLn, apiURL.Host)
	kubeconfig := netnstest.APIKubeconfig(t, env, "kubefarm-pxe", apiLn.Addr().String())

	// The API objects: an image, a pool, its two machines.
	cl := env.Client
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bootchain-"}}
	if err := cl.Create(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	c.namespace = nsObj.Name
	c.image = &kubefarmv1.BootImage{
		ObjectMeta: metav1.ObjectMeta{Name: "bootchain"},
		Spec: kubefarmv1.BootImageSpec{
			KubeletVersion: "v1.34.0",
			Kernel:         kubefarmv1.Artifact{Digest: sha(kernel), URL: originURL + "/" + sha(kernel)},
			Initrd:         kubefarmv1.Artifact{Digest: sha(initrd), URL: originURL + "/" + sha(initrd)},
			Rootfs:         kubefarmv1.Artifact{Digest: sha(rootfs), URL: originURL + "/" + sha(rootfs)},
		},
	}
	if err := cl.Create(ctx, c.image); err != nil {
		t.Fatalf("creating BootImage: %v", err)
	}
	// A second image, the same files said to be arm64, in a pool of its
	// own with one x86 machine: misplaced, it must fetch nothing.
	c.armImage = c.image.DeepCopy()
	c.armImage.ObjectMeta = metav1.ObjectMeta{Name: "bootchain-arm64"}
	c.armImage.Spec.Architecture = "arm64"
	if err := cl.Create(ctx, c.armImage); err != nil {
		t.Fatalf("creating BootImage: %v", err)
	}
	vms := []vm{biosVM, uefiVM}
	pool := &kubefarmv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: "vms"},
		Spec: kubefarmv1.NodePoolSpec{
			Cluster: "c1", BootImage: c.image.Name,
			Network: kubefarmv1.BootNetwork{Subnet: subnet, Gateway: serverIP},
			// panic=-1 with qemu's -no-reboot: a panic ends the VM at once.
			KernelArgs: []string{"console=ttyS0", "panic=-1"},
		},
	}
	// No tags, no initrd= of the test's own: Debian's iPXE
	// (1.0.0+git-20190125) predates LoadFile2 initrd support, so the UEFI
	// machine finds its initrd only through the initrd= that
	// kubefarm-pxe's script puts on the command line.
	for _, v := range vms {
		pool.Spec.Machines = append(pool.Spec.Machines, kubefarmv1.MachineEntry{Name: v.name, MACs: []string{v.mac}, IP: v.ip})
	}
	if err := cl.Create(ctx, pool); err != nil {
		t.Fatalf("creating NodePool: %v", err)
	}
	for _, v := range vms {
		m := &kubefarmv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: v.name},
			Spec: kubefarmv1.MachineSpec{
				Pool: pool.Name, Cluster: "c1", Hostname: v.name, MACs: []string{v.mac}, IP: v.ip, DesiredImage: c.image.Name,
			},
		}
		if err := cl.Create(ctx, m); err != nil {
			t.Fatalf("creating Machine %s: %v", v.name, err)
		}
	}

	armPool := &kubefarmv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: "arm"},
		Spec: kubefarmv1.NodePoolSpec{
			Cluster: "c1", BootImage: c.armImage.Name,
			Network:  kubefarmv1.BootNetwork{Subnet: subnet, Gateway: serverIP},
			Machines: []kubefarmv1.MachineEntry{{Name: misplacedVM.name, MACs: []string{misplacedVM.mac}, IP: misplacedVM.ip}},
		},
	}
	if err := cl.Create(ctx, armPool); err != nil {
		t.Fatalf("creating NodePool: %v", err)
	}
	if err := cl.Create(ctx, &kubefarmv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: misplacedVM.name},
		Spec: kubefarmv1.MachineSpec{
			Pool: armPool.Name, Cluster: "c1", Hostname: misplacedVM.name, MACs: []string{misplacedVM.mac}, IP: misplacedVM.ip,
			DesiredImage: c.armImage.Name,
		},
	}); err != nil {
		t.Fatalf("creating Machine %s: %v", misplacedVM.name, err)
	}

	// kubefarm-pxe, as production runs it, in the namespace.
	pxe := netnstest.StartPXE(t, "bootchain", ns, binary,
		"--kubeconfig", kubeconfig,
		"--server-ip", serverIP,
		"--interface", bridge,
		"--http-addr", net.JoinHostPort(serverIP, strconv.Itoa(httpPort)),
		"--metrics-addr", net.JoinHostPort(serverIP, strconv.Itoa(metricsPort)),
		"--tftp-addr", net.JoinHostPort(serverIP, "69"),
		"--ipxe-dir", ipxeDir,
		"--cache-dir", t.TempDir(),
		"--fetch-allowed-cidrs", "127.0.0.2/32",
		"--zap-log-level", "debug",
	)
	c.serverLog = pxe.Log

	// Ready: the cache has synced, and the script is served for both
	// machines. HEAD caches the artifacts (serving a script opens nothing).
	base := fmt.Sprintf("http://%s:%d", serverIP, httpPort)
	pxe.WaitHTTP(ctx, t, c.http, 2*time.Minute,
		fmt.Sprintf("http://%s:%d/healthz", serverIP, metricsPort), base+"/boot/"+biosVM.mac+".ipxe", base+"/boot/"+uefiVM.mac+".ipxe",
		base+"/boot/"+misplacedVM.mac+".ipxe")
	t.Logf("kubefarm-pxe serving after %s", time.Since(start).Round(time.Millisecond))

	t.Run("BIOS", func(t *testing.T) { c.boot(t, biosVM) })
	t.Run("UEFI", func(t *testing.T) { c.boot(t, uefiVM) })
	t.Run("an x86 machine in a pool of arm64 images fetches nothing", func(t *testing.T) { c.refuse(t, misplacedVM) })
	t.Logf("whole test: %s", time.Since(start).Round(time.Millisecond))
}

// boot starts v in qemu and waits for its report in the Machine's status.
func (c *chain) boot(t *testing.T, v vm) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	hw, _ := net.ParseMAC(v.mac)
	before := c.metrics(t)
	logOffset := len(c.serverLog.String())

	// Watch the Machine before the VM can report.
	wc, err := client.NewWithWatch(c.env.Config, client.Options{Scheme: c.env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &kubefarmv1.MachineList{}, client.InNamespace(c.namespace), client.MatchingFields{"metadata.name": v.name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	run := c.startVM(t, v)
	console, capture := run.console, run.capture
	qexit := run.exit

	// The proof: the report, recorded by kubefarm-pxe in status.lastBoot.
	var rec *kubefarmv1.BootRecord
	for rec == nil {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the Machine watch ended")
			}
			if m, isM := ev.Object.(*kubefarmv1.Machine); isM && ev.Type != watch.Deleted && m.Status.LastBoot != nil {
				rec = m.Status.LastBoot
			}
		case err := <-qexit:
			run.done = true
			t.Fatalf("qemu exited before %s reported its boot: %v", v.name, err)
		case <-ctx.Done():
			t.Fatalf("%s did not report its boot within the deadline", v.name)
		}
	}
	reported := time.Since(start)
	if rec.ImageDigest != c.image.Spec.Rootfs.Digest {
		t.Errorf("reported image %s, want %s", rec.ImageDigest, c.image.Spec.Rootfs.Digest)
	}
	if !isUUID(rec.BootID) {
		t.Errorf("boot ID %q is not a UUID", rec.BootID)
	}
	// The initrd powers the machine off after its report.
	select {
	case err := <-qexit:
		run.done = true
		if err != nil {
			t.Errorf("qemu: %v", err)
		}
	case <-ctx.Done():
		t.Errorf("%s did not power off after reporting", v.name)
	}
	t.Logf("%s: reported boot %s after %s, powered off after %s", v.name, rec.BootID, reported.Round(time.Millisecond),
		time.Since(start).Round(time.Millisecond))

	b, err := os.ReadFile(console)
	if err != nil {
		t.Fatal(err)
	}
	cons := string(b)
	for _, want := range []string{"Linux version", "initrd=initrd", "bootchain: init running", "bootchain: leased " + v.ip, "kubefarm.image=" + rec.ImageDigest, ReportLine} {
		if !strings.Contains(cons, want) {
			t.Errorf("serial console lacks %q", want)
		}
	}
	if strings.Contains(cons, FailedLine) {
		t.Errorf("the initrd reported a failure")
	}
	if !strings.Contains(cons, rec.BootID) {
		t.Errorf("the console does not show boot ID %s being reported", rec.BootID)
	}

	// The client's side, from the NIC's packet capture.
	tr, err := readPcap(capture, hw)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s on the wire:\n%s", v.name, tr)
	c.checkWire(t, v, tr)
	// The server's side: its metrics and log.
	c.checkServer(t, v, before, c.metrics(t), c.serverLog.String()[logOffset:])
}

// runningVM is a qemu machine of the test: its serial console's and its
// NIC capture's files, and qemu's exit.
type runningVM struct {
	console, capture string
	exit             chan error
	done             bool // exit has been received
	process          *os.Process
}

// stop powers the machine off (kills qemu) and waits for it.
func (r *runningVM) stop() {
	if !r.done {
		_ = r.process.Kill()
		<-r.exit
		r.done = true
	}
}

// startVM powers v on in qemu, its NIC on a new tap of the boot bridge,
// network boot first and no reboot. The machine is killed when the test
// ends; a failed test keeps its console and packet capture.
func (c *chain) startVM(t *testing.T, v vm) *runningVM {
	t.Helper()
	dir := t.TempDir()
	console, capture := filepath.Join(dir, "console.log"), filepath.Join(dir, "nic.pcap")
	hw, _ := net.ParseMAC(v.mac)
	tap := "kftap-" + v.name
	netnstest.Run(t, "ip", "-n", c.ns, "tuntap", "add", "dev", tap, "mode", "tap")
	netnstest.Run(t, "ip", "-n", c.ns, "link", "set", tap, "master", bridge)
	netnstest.Run(t, "ip", "-n", c.ns, "link", "set", tap, "up")

	args := []string{
		"-machine", "pc,accel=tcg", "-m", "512", "-smp", "1",
		"-display", "none", "-monitor", "none", "-serial", "file:" + console,
		// vnet_hdr=off: the capture then holds plain Ethernet frames.
		"-netdev", "tap,id=n0,ifname=" + tap + ",script=no,downscript=no,vnet_hdr=off",
		"-object", "filter-dump,id=d0,netdev=n0,file=" + capture,
		"-boot", "n", "-no-reboot",
	}
	if v.uefi {
		// No option ROM: OVMF's own virtio-net driver and PXE do the
		// firmware's part, as a UEFI server's firmware would.
		args = append(args, "-bios", ovmf, "-device", "virtio-net-pci,netdev=n0,mac="+v.mac+",romfile=")
	} else {
		// SeaBIOS runs Debian's iPXE ROM for the e1000 (ipxe-qemu).
		args = append(args, "-device", "e1000,netdev=n0,mac="+v.mac)
	}
	var qemuOut netnstest.LockedBuffer
	q := exec.Command("ip", append([]string{"netns", "exec", c.ns, "qemu-system-x86_64"}, args...)...)
	q.Stdout, q.Stderr = &qemuOut, &qemuOut
	if err := q.Start(); err != nil {
		t.Fatal(err)
	}
	qexit := make(chan error, 1)
	go func() { qexit <- q.Wait() }()
	run := &runningVM{console: console, capture: capture, exit: qexit, process: q.Process}
	t.Cleanup(func() {
		if !run.done {
			_ = q.Process.Kill()
			<-qexit
		}
		if t.Failed() {
			if keep, err := os.MkdirTemp("", "kubefarm-bootchain-"+v.name+"-"); err == nil {
				_ = copyFile(console, filepath.Join(keep, "console.log"))
				_ = copyFile(capture, filepath.Join(keep, "nic.pcap"))
				t.Logf("kept the console log and the NIC's packet capture in %s", keep)
			}
			b, _ := os.ReadFile(console)
			t.Logf("serial console of %s:\n%s", v.name, tail(string(b), 150))
			if tr, err := readPcap(capture, hw); err == nil {
				t.Logf("packets of %s:\n%s", v.name, tr)
			} else {
				t.Logf("packet capture: %v", err)
			}
			t.Logf("qemu output: %s", qemuOut.String())
		}
	})
	return run
}

// pxeNoDiscovery is the option 43 of a PXE reply: PXE_DISCOVERY_CONTROL
// (sub-option 6) = 8, boot the file in the reply without boot server
// discovery.
var pxeNoDiscovery = []byte{6, 1, 8, 255}

// checkWire asserts every stage the VM went through on its NIC: the UEFI
// firmware's PXE loads ipxe.efi over TFTP, and neither it nor iPXE asks
// port 4011 for anything.
func (c *chain) checkWire(t *testing.T, v vm, tr *wireTrace) {
	t.Helper()
	base := fmt.Sprintf("http://%s:%d", serverIP, httpPort)
	script := base + "/boot/" + v.mac + ".ipxe"
	var firmwareTFTP, ipxeScript, kernelAck bool
	for _, r := range tr.Replies {
		if r.Type != dhcpv4.MessageTypeAck && r.Type != dhcpv4.MessageTypeOffer {
			continue
		}
		if !r.YourIP.Equal(net.ParseIP(v.ip)) {
			t.Errorf("DHCP %s offered %s, want %s", r.Type, r.YourIP, v.ip)
		}
		switch {
		case r.ClientIPXE && r.BootFile == script:
			ipxeScript = true
			// iPXE takes a "PXEClient" reply without siaddr for a
			// ProxyDHCP offer and asks port 4011 before booting.
			if r.VendorClass != "" || r.VendorOptions != nil {
				t.Errorf("DHCP %s with iPXE's script carries option 60 %q / option 43 %x, want neither", r.Type, r.VendorClass, r.VendorOptions)
			}
			// Nor should it wait 2 s for ProxyDHCP offers.
			if !bytes.Equal(r.IPXEOptions, []byte{0xb0, 1, 1}) {
				t.Errorf("DHCP %s with iPXE's script: option 175 %x, want b00101 (no-pxedhcp)", r.Type, r.IPXEOptions)
			}
		case !r.ClientIPXE && r.ClientArch == 7 && r.BootFile == "ipxe.efi":
			firmwareTFTP = true
			// Without option 43 EDK2 takes a "PXEClient" reply for a BINL
			// offer and asks port 4011 for the boot file.
			if r.VendorClass != "PXEClient" || !bytes.Equal(r.VendorOptions, pxeNoDiscovery) {
				t.Errorf("DHCP %s of ipxe.efi to the firmware: option 60 %q, option 43 %x; want PXEClient and %x", r.Type, r.VendorClass, r.VendorOptions, pxeNoDiscovery)
			}
		case !r.ClientIPXE && r.ClientArch == -1 && r.BootFile == "":
			// The initrd's udhcpc: an address, no boot file.
			kernelAck = kernelAck || r.Type == dhcpv4.MessageTypeAck
		case !r.ClientIPXE:
			t.Errorf("unexpected DHCP reply to a non-iPXE client (arch %d): %s %q", r.ClientArch, r.Type, r.BootFile)
		}
	}
	if !ipxeScript {
		t.Errorf("no DHCP reply sent iPXE to %s", script)
	}
	checkIPv6Wait(t, tr, "/boot/"+v.mac+".ipxe")
	if !kernelAck {
		t.Errorf("no DHCP ACK for the booted kernel's client")
	}
	if v.uefi {
		if !firmwareTFTP {
			t.Errorf("no DHCP reply sent the UEFI firmware's PXE (arch 7) to TFTP ipxe.efi")
		}
		if !contains(tr.TFTPReads, "ipxe.efi") {
			t.Errorf("the firmware's PXE did not read ipxe.efi over TFTP (reads: %q)", tr.TFTPReads)
		}
		// EDK2 asks for an RFC 7440 window (PcdPxeTftpWindowSize, 4 by
		// default); kubefarm-pxe grants it and the firmware then sends
		// one ACK per window, not one per block.
		if w := tr.TFTPAsked["windowsize"]; w != "" {
			if tr.TFTPGranted["windowsize"] != w {
				t.Errorf("the firmware asked for windowsize %s; OACK %v", w, tr.TFTPGranted)
			}
			if n, _ := strconv.Atoi(w); n > 1 && tr.TFTPAcks > tr.TFTPData/n+2 {
				t.Errorf("the firmware sent %d ACKs for %d DATA packets with a window of %s", tr.TFTPAcks, tr.TFTPData, w)
			}
		}
		t.Logf("firmware TFTP: asked %v, granted %v, %d DATA, %d ACKs", tr.TFTPAsked, tr.TFTPGranted, tr.TFTPData, tr.TFTPAcks)
		if hasRequest(tr, "GET /ipxe/") {
			t.Errorf("the firmware fell back to UEFI HTTP boot")
		}
	} else if len(tr.TFTPReads) != 0 {
		t.Errorf("TFTP reads by a client already running iPXE: %q", tr.TFTPReads)
	}
	// An authoritative kubefarm-pxe does not listen on 4011: every
	// request there is a stall of seconds (iPXE) to a minute (EDK2).
	unreachable4011 := 0
	for _, p := range tr.Unreachable {
		if p == 4011 {
			unreachable4011++
		}
	}
	if tr.BootServerRequests != 0 || unreachable4011 != 0 {
		t.Errorf("%d packets to port 4011, %d ICMP port unreachable for it: a client took a reply for a ProxyDHCP/BINL offer",
			tr.BootServerRequests, unreachable4011)
	}
	img := c.image.Spec
	for _, want := range []string{
		"GET /boot/" + v.mac + ".ipxe ",
		"GET /artifacts/" + img.Kernel.Digest + " ",
		"GET /artifacts/" + img.Initrd.Digest + " ",
		"GET /secret/" + v.mac + " ",
		"POST /report ",
	} {
		if !hasRequest(tr, want) {
			t.Errorf("no HTTP request %q from %s", strings.TrimSpace(want), v.name)
		}
	}
}

func hasRequest(tr *wireTrace, prefix string) bool {
	for _, r := range tr.HTTPRequests {
		if strings.HasPrefix(r, prefix) {
			return true
		}
	}
	return false
}

// checkServer asserts kubefarm-pxe's own record of the boot: metric deltas
// over the boot and its log lines with the machine's address.
func (c *chain) checkServer(t *testing.T, v vm, before, after map[string]float64, log string) {
	t.Helper()
	delta := func(series string) float64 { return after[series] - before[series] }
	atLeast := map[string]float64{
		`kubefarm_pxe_dhcp_packets_total{result="offered",type="DISCOVER"}`: 2, // iPXE, kernel (+ UEFI firmware)
		`kubefarm_pxe_dhcp_packets_total{result="acked",type="REQUEST"}`:    2,
		`kubefarm_pxe_http_requests_total{code="200",route="boot"}`:         1,
		`kubefarm_pxe_http_requests_total{code="200",route="artifacts"}`:    2,
		`kubefarm_pxe_http_requests_total{code="204",route="report"}`:       1,
		`kubefarm_pxe_http_requests_total{code="200",route="secret"}`:       1,
		`kubefarm_pxe_http_bytes_total{route="artifacts"}`:                  float64(c.kernelLen + c.initrdLen),
	}
	if v.uefi {
		atLeast[`kubefarm_pxe_dhcp_packets_total{result="offered",type="DISCOVER"}`] = 3
		atLeast[`kubefarm_pxe_dhcp_packets_total{result="acked",type="REQUEST"}`] = 3
		atLeast[`kubefarm_pxe_tftp_transfers_total{result="ok"}`] = 1
	}
	if got := delta(`kubefarm_pxe_http_requests_total{code="200",route="ipxe"}`); got != 0 {
		t.Errorf("%v iPXE binaries served over HTTP: a firmware fell back to UEFI HTTP boot", got)
	}
	for s, want := range atLeast {
		if got := delta(s); got < want {
			t.Errorf("%s rose by %v during the boot, want at least %v", s, got, want)
		}
	}
	var lines []string
	for _, want := range []string{`"msg":"serving boot script"`, `"msg":"boot recorded"`} {
		found := false
		sc := bufio.NewScanner(strings.NewReader(log))
		for sc.Scan() {
			if l := sc.Text(); strings.Contains(l, want) && strings.Contains(l, `"peer":"`+v.ip+`:`) {
				found = true
				lines = append(lines, l)
			}
		}
		if !found {
			t.Errorf("kubefarm-pxe did not log %s for peer %s", want, v.ip)
		}
	}
	if v.uefi {
		found := false
		sc := bufio.NewScanner(strings.NewReader(log))
		for sc.Scan() {
			if l := sc.Text(); strings.Contains(l, `"msg":"tftp transfer done"`) && strings.Contains(l, v.ip) && strings.Contains(l, `"file":"ipxe.efi"`) {
				found = true
				lines = append(lines, l)
			}
		}
		if !found {
			t.Errorf("kubefarm-pxe did not log a TFTP transfer of ipxe.efi to %s", v.ip)
		}
	}
	t.Logf("kubefarm-pxe's record of %s:\n%s", v.name, strings.Join(lines, "\n"))
}

// metrics scrapes kubefarm-pxe's /metrics into series -> value, the series
// spelled as in the text format (labels sorted by name).
func (c *chain) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := c.http.Get(fmt.Sprintf("http://%s:%d/metrics", serverIP, metricsPort))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, l := range strings.Split(string(body), "\n") {
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		if f, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
			out[l[:i]] = f
		}
	}
	return out
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if c != '-' {
				return false
			}
		} else if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// checkIPv6Wait: iPXE fetches nothing before its IPv6 router discovery has
// ended, which without an answer takes about 15 s of retries. kubefarm-pxe
// answers the solicitation (pxe/routeradv): an advertisement reaches the
// machine before it asks for its script, and iPXE solicits no more after
// it, so it was the answer, not a timeout, that ended the wait.
func checkIPv6Wait(t *testing.T, tr *wireTrace, scriptPath string) {
	t.Helper()
	get := slices.Index(tr.Order, "GET "+scriptPath)
	if get < 0 {
		t.Errorf("the machine never asked for %s (order on the wire %q)", scriptPath, tr.Order)
		return
	}
	ra := slices.Index(tr.Order[:get], "RA")
	if ra < 0 {
		t.Errorf("no router advertisement reached the machine before it asked for its script (order on the wire %q)", tr.Order[:get+1])
		return
	}
	if n := slices.Index(tr.Order[ra:get], "RS"); n >= 0 {
		t.Errorf("iPXE kept soliciting routers after the advertisement (order on the wire %q)", tr.Order[:get+1])
	}
}

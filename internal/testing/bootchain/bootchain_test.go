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
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/insomniacslk/dhcp/dhcpv4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/events"
)

// NICModules are the drivers of the x86 machines' virtual NICs: e1000 for
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
	// ipxeDir holds the Debian ipxe package's binaries.
	ipxeDir = "/usr/lib/ipxe"
)

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// TestBootChain boots virtual machines from kubefarm-pxe: see doc.go.
func TestBootChain(t *testing.T) {
	requireFacility(t, "amd64")
	// The watch client logs through controller-runtime; nothing to say here.
	ctrllog.SetLogger(logr.Discard())
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	a := prepareArtifacts(ctx, t, "amd64", NICModules)
	c := newChain(ctx, t, start, a)
	img := c.createImage(ctx, t, "bootchain", "", a)
	// A second image, the same files said to be arm64, in a pool of its
	// own with one x86 machine: misplaced, it must fetch nothing.
	armImg := c.createImage(ctx, t, "bootchain-arm64", "arm64", a)
	// panic=-1 with qemu's -no-reboot: a panic ends the VM at once.
	c.createPool(ctx, t, "vms", img, []string{"console=ttyS0", "panic=-1"}, biosVM, uefiVM)
	c.createPool(ctx, t, "arm", armImg, nil, misplacedVM)
	c.startPXE(ctx, t, ipxeDir, biosVM, uefiVM, misplacedVM)
	t.Logf("kubefarm-pxe serving after %s", time.Since(start).Round(time.Millisecond))

	t.Run("BIOS", func(t *testing.T) { c.boot(t, biosVM) })
	t.Run("UEFI", func(t *testing.T) { c.boot(t, uefiVM) })
	t.Run("an x86 machine in a pool of arm64 images fetches nothing", func(t *testing.T) { c.refuse(t, misplacedVM) })
	t.Logf("whole test: %s", time.Since(start).Round(time.Millisecond))
}

// boot starts v in qemu and waits for its report in the Machine's status.
func (c *chain) boot(t *testing.T, v vm) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), v.bootTimeout())
	defer cancel()
	img := c.images[v.name]
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
	if rec.ImageDigest != img.Spec.Rootfs.Digest {
		t.Errorf("reported image %s, want %s", rec.ImageDigest, img.Spec.Rootfs.Digest)
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

	checkConsole(t, v, run.console, rec)

	// The client's side, from the NIC's packet capture.
	tr, err := readPcap(run.capture, hw)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s on the wire:\n%s", v.name, tr)
	c.checkWire(t, v, tr)
	// The server's side: its metrics and log.
	c.checkServer(t, v, before, c.metrics(t), c.serverLog.String()[logOffset:])
}

// checkConsole asserts what v's serial console shows of the boot: the
// kernel, started with the initrd= that the EFI stub needs, and the
// initrd's lease and report of rec.
func checkConsole(t *testing.T, v vm, console string, rec *kubefarmv1.BootRecord) {
	t.Helper()
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
	// The script's architecture check passed (misplaced_test.go for its
	// refusal).
	if strings.Contains(cons, "this machine's iPXE is") {
		t.Errorf("the iPXE script refused the image on the console")
	}
	if !strings.Contains(cons, rec.BootID) {
		t.Errorf("the console does not show boot ID %s being reported", rec.BootID)
	}
}

// pxeNoDiscovery is the option 43 of a PXE reply: PXE_DISCOVERY_CONTROL
// (sub-option 6) = 8, boot the file in the reply without boot server
// discovery.
var pxeNoDiscovery = []byte{6, 1, 8, 255}

// checkWire asserts every stage the VM went through on its NIC: the UEFI
// firmware's PXE loads its iPXE over TFTP (checkFirmwareTFTP), and neither
// it nor iPXE asks port 4011 for anything.
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
		case !r.ClientIPXE && r.ClientArch == v.firmwareArch() && r.BootFile == v.bootFile():
			firmwareTFTP = true
			// Without option 43 EDK2 takes a "PXEClient" reply for a BINL
			// offer and asks port 4011 for the boot file.
			if r.VendorClass != "PXEClient" || !bytes.Equal(r.VendorOptions, pxeNoDiscovery) {
				t.Errorf("DHCP %s of %s to the firmware: option 60 %q, option 43 %x; want PXEClient and %x", r.Type, v.bootFile(), r.VendorClass, r.VendorOptions, pxeNoDiscovery)
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
			t.Errorf("no DHCP reply sent the UEFI firmware's PXE (arch %d) to TFTP %s", v.firmwareArch(), v.bootFile())
		}
		checkFirmwareTFTP(t, v, tr)
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
	img := c.images[v.name].Spec
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

// checkFirmwareTFTP: v's UEFI firmware read its iPXE over TFTP, in
// windows when it asked for them, and did not fall back to HTTP boot.
func checkFirmwareTFTP(t *testing.T, v vm, tr *wireTrace) {
	t.Helper()
	if !contains(tr.TFTPReads, v.bootFile()) {
		t.Errorf("the firmware's PXE did not read %s over TFTP (reads: %q)", v.bootFile(), tr.TFTPReads)
	}
	// EDK2 asks for an RFC 7440 window (PcdPxeTftpWindowSize, 4 by
	// default); kubefarm-pxe grants it and the firmware then sends one ACK
	// per window, not one per block.
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
		`kubefarm_pxe_http_bytes_total{route="artifacts"}`:                  float64(c.images[v.name].kernelLen + c.images[v.name].initrdLen),
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
		lines = append(lines, c.checkFirmwareServed(t, v, log)...)
	}
	t.Logf("kubefarm-pxe's record of %s:\n%s", v.name, strings.Join(lines, "\n"))
}

// checkFirmwareServed asserts kubefarm-pxe's record of v's UEFI firmware:
// the Event of its first DHCP offer names the boot file that the client's
// architecture decides (bootfile.Decide), and the log has the TFTP
// transfer of that file to v. It returns what it found.
func (c *chain) checkFirmwareServed(t *testing.T, v vm, log string) []string {
	t.Helper()
	var found []string
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, `"msg":"tftp transfer done"`) && strings.Contains(l, v.ip) && strings.Contains(l, `"file":"`+v.bootFile()+`"`) {
			found = append(found, l)
		}
	}
	if len(found) == 0 {
		t.Errorf("kubefarm-pxe did not log a TFTP transfer of %s to %s", v.bootFile(), v.ip)
	}
	var evs corev1.EventList
	if err := c.env.Client.List(context.Background(), &evs, client.InNamespace(c.namespace)); err != nil {
		t.Fatal(err)
	}
	offer := fmt.Sprintf("boot file %q", v.bootFile())
	offered := false
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == v.name && e.Reason == events.ReasonOffered && strings.Contains(e.Message, offer) {
			offered = true
			found = append(found, "Event "+e.Reason+": "+e.Message)
		}
	}
	if !offered {
		t.Errorf("no Offered Event on Machine %s says %s", v.name, offer)
	}
	return found
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

package main_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
	"github.com/kubefarm/kubefarm/pxe/bootsecret"
	"github.com/kubefarm/kubefarm/pxe/events"
)

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func freeUDPPort(t *testing.T) int {
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// bootImage is a BootImage whose artifacts are served by an HTTP server
// the test runs on loopback.
type bootImage struct {
	obj                    *kubefarmv1.BootImage
	kernel, initrd, rootfs []byte
}

func newBootImage(t *testing.T, nameStr, blobURL string, blobs map[string][]byte) bootImage {
	b := bootImage{kernel: randomBytes(t, 4096), initrd: randomBytes(t, 8192), rootfs: randomBytes(t, 65536)}
	for _, d := range [][]byte{b.kernel, b.initrd, b.rootfs} {
		blobs["/"+sha(d)] = d
	}
	b.obj = &kubefarmv1.BootImage{
		ObjectMeta: metav1.ObjectMeta{Name: nameStr},
		Spec: kubefarmv1.BootImageSpec{
			KubeletVersion: "v1.34.0",
			Kernel:         kubefarmv1.Artifact{Digest: sha(b.kernel), URL: blobURL + "/" + sha(b.kernel)},
			Initrd:         kubefarmv1.Artifact{Digest: sha(b.initrd), URL: blobURL + "/" + sha(b.initrd)},
			Rootfs:         kubefarmv1.Artifact{Digest: sha(b.rootfs), URL: blobURL + "/" + sha(b.rootfs)},
		},
	}
	return b
}

// TestBinary builds kubefarm-pxe and runs it against a real API server. It
// checks the wiring end to end: the cache and its MAC index feed the HTTP
// boot service (the script names the served image, not the desired one),
// the lease syncer feeds DHCP (an iPXE client is sent to the script URL,
// which is then fetched), TFTP serves undionly.kpxe, logs are JSON, and
// SIGTERM stops the process cleanly.
func TestBinary(t *testing.T) {
	const undionly = "/usr/lib/ipxe/undionly.kpxe"
	want, err := os.ReadFile(undionly)
	if err != nil {
		t.Skipf("SKIPPED, NOT PASSED: %s missing; install the Debian package ipxe", undionly)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	env := testenv.StartT(t, testenv.Options{})
	binary := testenv.BuildBinary(t, "kubefarm-pxe")
	kubeconfig, err := env.WriteKubeconfig(envtest.User{Name: "kubefarm-pxe", Groups: []string{"system:masters"}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	// Artifacts come from a plain HTTP server on loopback: on 127.0.0.2,
	// which --fetch-allowed-cidrs opens (127.0.0.1 is the API server's,
	// which artifact fetches never reach).
	blobs := map[string][]byte{}
	blobSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, ok := blobs[r.URL.Path]; ok {
			_, _ = w.Write(b)
			return
		}
		http.NotFound(w, r)
	}))
	blobLn, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	blobSrv.Listener = blobLn
	blobSrv.Start()
	t.Cleanup(blobSrv.Close)
	oldImg := newBootImage(t, "node-old", blobSrv.URL, blobs)
	newImg := newBootImage(t, "node-new", blobSrv.URL, blobs)

	c := env.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "pxe-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	const mac = "02:42:00:00:00:07"
	for _, o := range []*kubefarmv1.BootImage{oldImg.obj, newImg.obj} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating BootImage %s: %v", o.Name, err)
		}
	}
	pool := &kubefarmv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "workers"},
		Spec: kubefarmv1.NodePoolSpec{
			Cluster: "c1", BootImage: "node-new",
			Network:    kubefarmv1.BootNetwork{Subnet: "127.0.0.0/8", Gateway: "127.0.0.1"},
			KernelArgs: []string{"console=ttyS0"},
			Machines:   []kubefarmv1.MachineEntry{{Name: "m7", MACs: []string{mac}, IP: "127.0.0.1"}},
		},
	}
	if err := c.Create(ctx, pool); err != nil {
		t.Fatalf("creating NodePool: %v", err)
	}
	m := &kubefarmv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "m7"},
		Spec: kubefarmv1.MachineSpec{
			Pool: "workers", Cluster: "c1", Hostname: "m7", MACs: []string{mac}, IP: "127.0.0.1", DesiredImage: "node-new",
		},
	}
	if err := c.Create(ctx, m); err != nil {
		t.Fatalf("creating Machine: %v", err)
	}
	// The rollout controller has not moved this machine yet: it is pinned
	// to the old image while the pool wants the new one.
	m.Status.ServedImage = &kubefarmv1.ImageRef{Name: "node-old", Digest: oldImg.obj.Spec.Rootfs.Digest}
	if err := c.Status().Update(ctx, m); err != nil {
		t.Fatalf("setting servedImage: %v", err)
	}

	httpPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", httpPort)
	tftpAddr := fmt.Sprintf("127.0.0.1:%d", freeUDPPort(t))
	metricsPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", metricsPort)
	cmd, logBuf, exited := startPXE(t, binary,
		"--kubeconfig", kubeconfig,
		"--server-ip", "127.0.0.1",
		"--interface", "lo",
		"--http-addr", httpAddr,
		"--metrics-addr", metricsAddr,
		"--tftp-addr", tftpAddr,
		"--cache-dir", t.TempDir(),
		"--workers", "2", "--queue", "16",
		// The test's namespace plays kubefarm-pxe's own.
		"--pod-namespace", ns.Name,
		"--fetch-allowed-cidrs", "127.0.0.2/32",
	)

	// secret is the boot's secret once the machine took it; get sends it.
	var secret bootsecret.Secret
	get := func(url string) (int, []byte) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return 0, []byte(err.Error())
		}
		if secret != "" {
			bootsecret.SetHeader(req, secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, []byte(err.Error())
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, b
	}
	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true,
			func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	base := "http://" + httpAddr
	probes := "http://" + metricsAddr
	poll("/healthz never answered 200", func() bool { code, _ := get(probes + "/healthz"); return code == 200 })
	// The boot network's listener answers neither.
	for _, p := range []string{"/healthz", "/metrics"} {
		if code, body := get(base + p); code != http.StatusNotFound {
			t.Errorf("%s on the boot address: %d %q, want 404", p, code, body)
		}
	}

	// --verify-images (default): every BootImage's artifacts are fetched
	// into the cache and the image says so.
	for _, img := range []bootImage{oldImg, newImg} {
		poll("BootImage "+img.obj.Name+" never became ArtifactsVerified=True", func() bool {
			var got kubefarmv1.BootImage
			if err := c.Get(ctx, client.ObjectKeyFromObject(img.obj), &got); err != nil {
				return false
			}
			return meta.IsStatusConditionTrue(got.Status.Conditions, kubefarmv1.ConditionArtifactsVerified) &&
				meta.IsStatusConditionTrue(got.Status.Conditions, kubefarmv1.ConditionReady)
		})
	}

	// DHCP: an iPXE client (user class "iPXE") on loopback is sent to its
	// script URL. ciaddr makes the server answer unicast to our socket
	// instead of broadcasting.
	hw, _ := net.ParseMAC(mac)
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// discover sends one DISCOVER and returns the OFFER, or nil when none
	// came within the read deadline (the inventory may not be filled yet).
	discover := func(mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
		req, err := dhcpv4.NewDiscovery(hw, append([]dhcpv4.Modifier{dhcpv4.WithClientIP(net.IPv4(127, 0, 0, 1))}, mods...)...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.WriteTo(req.ToBytes(), &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 67}); err != nil {
			return nil
		}
		buf := make([]byte, 1500)
		for {
			_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				return nil
			}
			resp, err := dhcpv4.FromBytes(buf[:n])
			// Skip late answers to earlier attempts.
			if err == nil && resp.MessageType() == dhcpv4.MessageTypeOffer && resp.TransactionID == req.TransactionID {
				return resp
			}
		}
	}
	var offer *dhcpv4.DHCPv4
	poll("DHCP never offered", func() bool {
		offer = discover(dhcpv4.WithOption(dhcpv4.OptClientArch(iana.EFI_X86_64)), dhcpv4.WithUserClass("iPXE", false))
		return offer != nil
	})
	scriptURL := offer.BootFileNameOption()
	if want := base + "/boot/" + mac + ".ipxe"; scriptURL != want {
		t.Fatalf("DHCP boot file for iPXE %q, want %q", scriptURL, want)
	}
	// A BIOS PXE ROM is sent to TFTP for undionly.kpxe.
	bios := discover(dhcpv4.WithOption(dhcpv4.OptClientArch(iana.INTEL_X86PC)))
	if bios == nil || bios.BootFileNameOption() != "undionly.kpxe" || !bios.ServerIPAddr.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("BIOS offer: %v", bios)
	}

	// HTTP: the script DHCP pointed at, once the cache has the machine.
	var script string
	poll("script never served", func() bool {
		code, b := get(scriptURL)
		script = string(b)
		return code == 200
	})
	o := oldImg.obj.Spec
	for _, d := range []string{o.Kernel.Digest, o.Initrd.Digest, "kubefarm.image=" + o.Rootfs.Digest} {
		if !strings.Contains(script, d) {
			t.Errorf("script does not name the served image's %s:\n%s", d, script)
		}
	}
	if strings.Contains(script, newImg.obj.Spec.Kernel.Digest) {
		t.Errorf("script names the desired image, not the served one:\n%s", script)
	}
	if !strings.Contains(script, "\nkernel "+base+"/artifacts/"+o.Kernel.Digest+" console=ttyS0 ") {
		t.Errorf("script:\n%s", script)
	}
	if code, b := get(base + "/artifacts/" + o.Rootfs.Digest); code != 200 || !bytes.Equal(b, oldImg.rootfs) {
		t.Errorf("rootfs: %d, %d bytes", code, len(b))
	}
	if code, _ := get(base + "/boot/02:42:00:00:00:08.ipxe"); code != 404 {
		t.Errorf("unknown MAC: %d, want 404", code)
	}

	// The boot's secret: this replica answered the machine's iPXE DHCP
	// request above, so its first GET /secret gets it, and only that one.
	code, archive := get(base + "/secret/" + mac)
	if code != 200 {
		t.Fatalf("/secret: %d %s", code, archive)
	}
	secret, err = bootsecret.FromArchive(archive)
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := get(base + "/secret/" + mac); code != 403 {
		t.Errorf("second /secret: %d, want 403", code)
	}
	poll("status.bootCredential holds the secret's hash", func() bool {
		got := &kubefarmv1.Machine{}
		return c.Get(ctx, client.ObjectKeyFromObject(m), got) == nil && got.Status.BootCredential != nil &&
			secret.Matches(got.Status.BootCredential.SHA256)
	})
	if strings.Contains(logBuf.string(), string(secret)) {
		t.Error("the boot secret is in kubefarm-pxe's log")
	}

	// Boot configuration: the window is open (the secret was just issued)
	// but the tenant c1 has no token issuer credential yet, so 503, and the
	// log names the missing Secret; a MAC that is not this peer's is 403.
	credName := bootstraptoken.CredentialSecretName(ns.Name, "c1")
	if code, b := get(base + "/config/" + mac); code != 503 {
		t.Errorf("/config: %d %s, want 503", code, b)
	}
	if code, _ := get(base + "/config/02:42:00:00:00:08"); code != 403 {
		t.Errorf("/config unknown MAC: %d, want 403", code)
	}
	poll("the log names the missing credential", func() bool { return strings.Contains(logBuf.string(), credName+" not found") })

	// The credential arrives, as kubefarm-manager writes it: a kubeconfig
	// of kubefarm:token-issuer, whose tenant Role (the API server under
	// test plays the tenant too) is the one the controller applies. The
	// failed request left the window open: now the machine gets its token.
	role, binding := desired.TokenIssuerRBAC()
	for _, o := range []client.Object{role, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	issuerKubeconfig, err := env.WriteKubeconfig(envtest.User{Name: bootstraptoken.IssuerUser}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kc, err := os.ReadFile(issuerKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// As kubefarm-manager writes it once the tenant's endpoint is known:
	// the credential and the facts a node needs to reach the tenant.
	facts := []byte(`{"apiServer":"https://203.0.113.7:6443","caCert":"LS0tLS1CRUdJTg==","clusterDNS":["10.96.0.10"],"clusterDomain":"cluster.local","podCIDR":"10.244.0.0/16"}`)
	if err := c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: credName, Labels: bootstraptoken.CredentialLabels(ns.Name, "c1")},
		Data:       map[string][]byte{bootstraptoken.KeyKubeconfig: kc, bootstraptoken.KeyNodeFacts: facts},
	}); err != nil {
		t.Fatal(err)
	}
	var nodeConfig struct {
		Machine    string   `json:"machine"`
		JoinToken  string   `json:"joinToken"`
		APIServer  string   `json:"apiServer"`
		ClusterDNS []string `json:"clusterDNS"`
		PodCIDR    string   `json:"podCIDR"`
	}
	poll("/config serves a join token once the credential exists", func() bool {
		code, b := get(base + "/config/" + mac)
		return code == 200 && json.Unmarshal(b, &nodeConfig) == nil
	})
	if nodeConfig.APIServer != "https://203.0.113.7:6443" || len(nodeConfig.ClusterDNS) != 1 || nodeConfig.PodCIDR != "10.244.0.0/16" {
		t.Errorf("/config: tenant facts %+v, want those of the credential Secret", nodeConfig)
	}
	tok, err := bootstraptoken.Parse(nodeConfig.JoinToken)
	if err != nil || nodeConfig.Machine != ns.Name+"/m7" {
		t.Errorf("/config: machine %q, join token not one (%v)", nodeConfig.Machine, err)
	} else {
		s := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: bootstraptoken.SecretName(tok.ID)}, s); err != nil {
			t.Errorf("the token's Secret: %v", err)
		} else if s.Labels[kubefarmv1.LabelMachine] != "m7" {
			t.Errorf("token labels %v", s.Labels)
		}
		if strings.Contains(logBuf.string(), nodeConfig.JoinToken) {
			t.Error("the join token is in kubefarm-pxe's log")
		}
	}
	// Once: the window is consumed.
	if code, _ := get(base + "/config/" + mac); code != 403 {
		t.Errorf("second /config: %d, want 403", code)
	}
	// Boot report: recorded in the Machine's status.
	const bootID = "6b1f7f0e-3a0d-4c8e-9d8e-2f4b5c6d7e8f"
	report := `{"mac":"` + mac + `","bootID":"` + bootID + `","imageDigest":"` + o.Rootfs.Digest + `"}`
	req, err := http.NewRequest(http.MethodPost, base+"/report", strings.NewReader(report))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	bootsecret.SetHeader(req, secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Errorf("/report: %s", resp.Status)
	}
	got := &kubefarmv1.Machine{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(m), got); err != nil {
		t.Fatal(err)
	}
	if lb := got.Status.LastBoot; lb == nil || lb.BootID != bootID || lb.ImageDigest != o.Rootfs.Digest {
		t.Errorf("status.lastBoot = %+v", lb)
	}
	if got.Status.ServedImage == nil || got.Status.ServedImage.Name != "node-old" {
		t.Errorf("the report patch touched status.servedImage: %+v", got.Status.ServedImage)
	}

	// TFTP: undionly.kpxe over curl (and tftp-hpa when installed).
	out := filepath.Join(t.TempDir(), "undionly.kpxe")
	if b, err := exec.CommandContext(ctx, "curl", "-sS", "--tftp-blksize", "1428", "-o", out, "tftp://"+tftpAddr+"/undionly.kpxe").CombinedOutput(); err != nil {
		t.Errorf("curl tftp: %v %s", err, b)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, want) {
		t.Errorf("curl tftp: %d bytes, not identical to %s", len(got), undionly)
	}
	if _, err := exec.LookPath("tftp"); err == nil {
		out2 := filepath.Join(t.TempDir(), "undionly.kpxe")
		host, port, _ := net.SplitHostPort(tftpAddr)
		_ = exec.CommandContext(ctx, "tftp", "-m", "binary", host, port, "-c", "get", "undionly.kpxe", out2).Run()
		if got, _ := os.ReadFile(out2); !bytes.Equal(got, want) {
			t.Errorf("tftp-hpa: %d bytes, not identical to %s", len(got), undionly)
		}
	}

	code, metrics := get(probes + "/metrics")
	for _, s := range []string{
		`kubefarm_pxe_http_requests_total{code="200",route="boot"}`,
		`kubefarm_pxe_tftp_transfers_total{result="ok"}`,
		`kubefarm_pxe_dhcp_packets_total`,
		"kubefarm_pxe_http_connections_refused_total 0\n",
		"kubefarm_pxe_inventory_machines 1\n",
		"kubefarm_pxe_inventory_errors_total 0\n",
	} {
		if code != 200 || !bytes.Contains(metrics, []byte(s)) {
			t.Errorf("/metrics lacks %s", s)
		}
	}

	// Events: every stage above left one on the Machine, attached by UID
	// as `kubectl describe machine` finds them.
	wantReasons := []string{events.ReasonOffered, events.ReasonScriptServed, events.ReasonImageServed,
		events.ReasonConfigServed, events.ReasonRefused, events.ReasonBootReported}
	var seen map[string]string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var list corev1.EventList
		if err := c.List(ctx, &list, client.InNamespace(ns.Name)); err != nil {
			return false, err
		}
		seen = map[string]string{}
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == "Machine" && e.InvolvedObject.Name == "m7" && e.InvolvedObject.UID == m.UID {
				seen[e.Reason] = e.Message
			}
		}
		for _, r := range wantReasons {
			if _, ok := seen[r]; !ok {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Errorf("events on the machine: %v; have %v, want every one of %v", err, seen, wantReasons)
	}
	for r, msg := range seen {
		if nodeConfig.JoinToken != "" && strings.Contains(msg, nodeConfig.JoinToken) {
			t.Errorf("event %s carries the join token", r)
		}
	}

	// A second machine claiming the same MAC (admission would refuse it;
	// the test API server has no webhooks) makes the MAC ambiguous: the
	// index finds both and the script is no longer served.
	dup := m.DeepCopy()
	dup.ObjectMeta = metav1.ObjectMeta{Namespace: ns.Name, Name: "m7-dup"}
	dup.Status = kubefarmv1.MachineStatus{}
	if err := c.Create(ctx, dup); err != nil {
		t.Fatal(err)
	}
	poll("an ambiguous MAC kept being served", func() bool { code, _ := get(scriptURL); return code == 404 })

	// SIGTERM: a clean, prompt exit.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("no exit within 45s of SIGTERM")
	}
	lines := strings.Split(strings.TrimSpace(logBuf.string()), "\n")
	for _, l := range lines {
		var entry map[string]any
		if err := json.Unmarshal([]byte(l), &entry); err != nil || entry["msg"] == nil {
			t.Errorf("log line is not structured JSON: %q", l)
			break
		}
	}
	if !strings.Contains(logBuf.string(), `"msg":"stopped"`) {
		t.Errorf("no clean stop in the log")
	}
}

// startPXE runs the kubefarm-pxe binary with args, its log (JSON lines on
// stderr) collected into logBuf; exited gets its exit once the log is
// read to the end. It is killed when the test ends, and its log printed
// if the test failed.
func startPXE(t *testing.T, binary string, args ...string) (cmd *exec.Cmd, logBuf *lockedBuffer, exited <-chan error) {
	t.Helper()
	cmd = exec.Command(binary, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	logBuf = &lockedBuffer{}
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logBuf.write(sc.Text() + "\n")
		}
	}()
	go func() {
		<-logDone
		done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("kubefarm-pxe log:\n%s", logBuf.string())
		}
	})
	return cmd, logBuf, done
}

// lockedBuffer collects the binary's log while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) write(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(s)
}

func (l *lockedBuffer) string() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

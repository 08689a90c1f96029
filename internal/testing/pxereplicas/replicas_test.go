package pxereplicas

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/insomniacslk/dhcp/iana"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/testing/netnstest"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
	"github.com/kubefarm/kubefarm/pxe/dynamic"
)

// The boot network.
const (
	bridge     = "kfbr0"
	lanIP      = "10.78.0.1" // gateway, DNS, artifact origin
	subnet     = "10.78.0.0/24"
	httpPort   = 8080
	originPort = 8081
	// metricsPort is each replica's /healthz and /metrics (--metrics-addr),
	// on its LAN address here so that the test can reach it.
	metricsPort = 9090
	// apiAddr is where each replica's namespace reaches the API server.
	apiAddr = "127.0.0.1:6443"
	ipxeDir = "/usr/lib/ipxe"
	// Every client namespace calls its interface this.
	ifname = "eth0"
	// leaseTime is the pool's lease time.
	leaseTime = 10 * time.Minute
)

var dnsServers = []string{lanIP, "10.78.0.53"}

const domain = "farm.test"

// clientKind is what the Go client pretends to be.
type clientKind int

const (
	iPXE     clientKind = iota // iPXE running: user class "iPXE" -> HTTP script URL
	biosROM                    // BIOS PXE ROM: arch 0, PXEClient -> TFTP undionly.kpxe
	uefiFirm                   // UEFI x86-64 firmware PXE: arch 7 -> TFTP ipxe.efi
)

func (k clientKind) String() string {
	return [...]string{"iPXE", "BIOS PXE ROM", "UEFI PXE"}[k]
}

// machine is one Machine of the pool and how the test's client talks for it.
type machine struct {
	name string
	macs []string
	ip   string
	tags []string
	kind clientKind
	// mac is the MAC the client uses (one of macs).
	mac string
	// selects is the replica whose OFFER the client takes (0: A, 1: B).
	selects int
}

var machines = []machine{
	{name: "m1", macs: []string{"52:54:00:78:00:11"}, ip: "10.78.0.11", kind: iPXE, mac: "52:54:00:78:00:11", selects: 0},
	{name: "m2", macs: []string{"52:54:00:78:00:12"}, ip: "10.78.0.12", tags: []string{"ntp"}, kind: biosROM, mac: "52:54:00:78:00:12", selects: 1},
	{name: "m3", macs: []string{"52:54:00:78:00:13", "52:54:00:78:01:13"}, ip: "10.78.0.13", tags: []string{"ntp"}, kind: uefiFirm,
		mac: "52:54:00:78:01:13", selects: 0},
}

// ntpOption is the "ntp" tag's DHCP option 42 (NTP servers): 10.78.0.1.
var ntpOption = []byte{10, 78, 0, 1}

// replica is one kubefarm-pxe process and its namespace.
type replica struct {
	name, ns, ip string
	pxe          *netnstest.PXE
}

func (r *replica) base() string { return fmt.Sprintf("http://%s:%d", r.ip, httpPort) }

// probes is the root of the replica's /healthz and /metrics.
func (r *replica) probes() string { return fmt.Sprintf("http://%s:%d", r.ip, metricsPort) }

// farm is everything the subtests share.
type farm struct {
	lan      string
	replicas [2]*replica
	lanHTTP  *http.Client // from the LAN namespace: metrics, scripts
	kernel   []byte
	image    *kubefarmv1.BootImage
	probe    string // the Go client's namespace
	replies  chan reply
	// conn is the Go client's socket: port 68, bound to the probe's
	// interface (SO_BINDTODEVICE), broadcast allowed.
	conn net.PacketConn
	// leasedFrom: machine name -> replica index whose ACK it holds.
	leasedFrom map[string]int
	// api reads the objects the replicas write (DHCPLeases); poolNS is
	// the pool's namespace.
	api    client.Client
	poolNS string
	// dynamicIP: the address the catch-all range gave stranger1;
	// dynamicLease: its DHCPLease as A's ACK left it.
	dynamicIP    net.IP
	dynamicLease *kubefarmv1.DHCPLease
}

// The pool's catch-all range, 10.78.0.10-10.78.0.19: it holds the three
// static machines' addresses, which must never go to a stranger.
const rangeStart, rangeEnd = "10.78.0.10", "10.78.0.19"

// Unknown MACs: no Machine has them. stranger2's search starts on a static
// machine's address (asserted in dynamicRange), so the skip is exercised;
// fillers take the rest of the range and latecomer finds it full.
var (
	stranger1, stranger2 = strangerMAC(0x71), strangerMAC(0x72)
	fillers              = []net.HardwareAddr{strangerMAC(0x73), strangerMAC(0x74), strangerMAC(0x75), strangerMAC(0x76), strangerMAC(0x77)}
	latecomer            = strangerMAC(0x78)
)

func strangerMAC(last byte) net.HardwareAddr { return net.HardwareAddr{0x02, 0x78, 0, 0, 0, last} }

// rangeSize is the number of addresses from rangeStart to rangeEnd.
const rangeSize = 10

// rangeAddr is the address at offset i of the range.
func rangeAddr(i int) string { return fmt.Sprintf("10.78.0.%d", 10+i%rangeSize) }

// firstOffset is where mac's search starts, computed here independently of
// pxe/dynamic from what its doc.go promises every replica (and every
// version of it, in a rolling upgrade) computes: the 64-bit FNV-1a of the
// six bytes modulo the range size.
func firstOffset(mac net.HardwareAddr) int {
	h := fnv.New64a()
	_, _ = h.Write(mac)
	return int(h.Sum64() % rangeSize)
}

// expectedAddr is the address the range must give mac when taken holds the
// addresses leased to others: the first of its search order, upwards from
// firstOffset and wrapping, that is neither a static machine's nor taken;
// "" when there is none.
func expectedAddr(mac net.HardwareAddr, taken map[string]bool) string {
	for i := 0; i < rangeSize; i++ {
		a := rangeAddr(firstOffset(mac) + i)
		if !isStaticIP(a) && !taken[a] {
			return a
		}
	}
	return ""
}

func isStaticIP(a string) bool {
	for _, m := range machines {
		if m.ip == a {
			return true
		}
	}
	return false
}

// reply is one DHCP packet the Go client received.
type reply struct {
	pkt *dhcpv4.DHCPv4
	src *net.UDPAddr
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// TestTwoReplicas: see doc.go.
func TestTwoReplicas(t *testing.T) {
	netnstest.RequireRoot(t)
	if _, err := exec.LookPath("busybox"); err != nil {
		t.Fatal("busybox is not installed (apt-get install -y busybox): udhcpc and tftp are the real clients of this test")
	}
	for _, f := range []string{"undionly.kpxe", "ipxe.efi"} {
		if _, err := os.Stat(filepath.Join(ipxeDir, f)); err != nil {
			t.Fatalf("%s: install the Debian package ipxe", err)
		}
	}
	ctrllog.SetLogger(logr.Discard())
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	binary := netnstest.BuildPXE(ctx, t)
	t.Logf("built kubefarm-pxe in %s", time.Since(start).Round(time.Millisecond))

	f := &farm{leasedFrom: map[string]int{}}
	f.lan = netnstest.New(t, "kfrep-lan")
	netnstest.Bridge(t, f.lan, bridge, lanIP+"/24")
	f.lanHTTP = netnstest.HTTPClient(f.lan)

	env := testenv.StartT(t, testenv.Options{})
	apiURL, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("API server up after %s", time.Since(start).Round(time.Millisecond))

	// The artifact origin, on the LAN: a BootImage's published blobs.
	f.kernel = []byte("kubefarm replicas test: not a kernel\n")
	initrd := []byte("kubefarm replicas test: not an initrd\n")
	rootfs := []byte("kubefarm replicas test: not a root file system\n")
	blobs := map[string][]byte{"/" + sha(f.kernel): f.kernel, "/" + sha(initrd): initrd, "/" + sha(rootfs): rootfs}
	originLn := netnstest.Listen(t, f.lan, net.JoinHostPort(lanIP, strconv.Itoa(originPort)))
	netnstest.ServeBlobs(t, originLn, blobs)
	originURL := fmt.Sprintf("http://%s:%d", lanIP, originPort)

	f.createObjects(ctx, t, env, originURL, initrd, rootfs)

	// Both replicas, each in its own namespace on the bridge, each reaching
	// the API server through its own forwarder at the same address.
	kubeconfig := netnstest.APIKubeconfig(t, env, "kubefarm-pxe", apiAddr)
	for i, ip := range []string{"10.78.0.2", "10.78.0.3"} {
		r := &replica{name: string(rune('A' + i)), ip: ip}
		r.ns = netnstest.New(t, "kfrep-"+strings.ToLower(r.name))
		netnstest.Attach(t, f.lan, bridge, "kfrep"+r.name, r.ns, ifname, "", ip+"/24")
		netnstest.Forward(t, netnstest.Listen(t, r.ns, apiAddr), apiURL.Host)
		r.pxe = netnstest.StartPXE(t, r.name, r.ns, binary,
			"--kubeconfig", kubeconfig,
			"--server-ip", ip,
			"--interface", ifname,
			"--http-addr", net.JoinHostPort(ip, strconv.Itoa(httpPort)),
			"--metrics-addr", net.JoinHostPort(ip, strconv.Itoa(metricsPort)),
			"--tftp-addr", net.JoinHostPort(ip, "69"),
			"--ipxe-dir", ipxeDir,
			"--cache-dir", t.TempDir(),
		)
		f.replicas[i] = r
	}
	// Ready: cache synced, and every machine's script served (HEAD caches
	// the artifacts; serving a script opens nothing).
	for _, r := range f.replicas {
		urls := []string{r.probes() + "/healthz"}
		for _, m := range machines {
			for _, mac := range m.macs {
				urls = append(urls, r.base()+"/boot/"+mac+".ipxe")
			}
		}
		r.pxe.WaitHTTP(ctx, t, f.lanHTTP, 2*time.Minute, urls...)
	}
	t.Logf("both replicas serving after %s", time.Since(start).Round(time.Millisecond))

	// The Go client: a namespace on the bridge whose interface has m1's
	// MAC (it rebinds m1's lease later) and, until then, no address. A UDP
	// socket bound to the interface sends the broadcasts from 0.0.0.0 and
	// receives every broadcast reply, from both replicas.
	f.probe = netnstest.New(t, "kfrep-probe")
	netnstest.Attach(t, f.lan, bridge, "kfrepP", f.probe, ifname, machines[0].mac, "")
	if err := netnstest.Do(f.probe, func() (err error) {
		f.conn, err = server4.NewIPv4UDPConn(ifname, &net.UDPAddr{Port: dhcpv4.ClientPort})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	f.replies = make(chan reply, 64)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		buf := make([]byte, 4096)
		for {
			n, from, err := f.conn.ReadFrom(buf)
			if err != nil {
				return
			}
			p, err := dhcpv4.FromBytes(buf[:n])
			if err != nil || p.OpCode != dhcpv4.OpcodeBootReply {
				continue
			}
			src, _ := from.(*net.UDPAddr)
			f.replies <- reply{pkt: p, src: src}
		}
	}()
	t.Cleanup(func() {
		f.conn.Close()
		<-readerDone
	})

	phase := time.Now()
	t.Run("IdenticalAnswers", func(t *testing.T) {
		for _, m := range machines {
			t.Run(m.name, func(t *testing.T) { f.identical(ctx, t, m) })
		}
	})
	t.Logf("identical answers checked in %s", time.Since(phase).Round(time.Millisecond))
	if t.Failed() {
		return
	}

	phase = time.Now()
	t.Run("DynamicRange", func(t *testing.T) { f.dynamicRange(ctx, t) })
	t.Logf("dynamic range checked in %s", time.Since(phase).Round(time.Millisecond))
	if t.Failed() {
		return
	}

	phase = time.Now()
	t.Run("KillOne", func(t *testing.T) { f.killOne(ctx, t) })
	t.Logf("kill-one checked in %s", time.Since(phase).Round(time.Millisecond))
	t.Logf("whole test: %s", time.Since(start).Round(time.Millisecond))
}

// createObjects writes the BootImage, the NodePool, and its Machines with
// status.servedImage pinned as the NodePool controller does on first boot.
func (f *farm) createObjects(ctx context.Context, t *testing.T, env *testenv.Env, originURL string, initrd, rootfs []byte) {
	t.Helper()
	cl := env.Client
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "replicas-"}}
	if err := cl.Create(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	f.api, f.poolNS = cl, nsObj.Name
	f.image = &kubefarmv1.BootImage{
		ObjectMeta: metav1.ObjectMeta{Name: "replicas"},
		Spec: kubefarmv1.BootImageSpec{
			KubeletVersion: "v1.34.0",
			Kernel:         kubefarmv1.Artifact{Digest: sha(f.kernel), URL: originURL + "/" + sha(f.kernel)},
			Initrd:         kubefarmv1.Artifact{Digest: sha(initrd), URL: originURL + "/" + sha(initrd)},
			Rootfs:         kubefarmv1.Artifact{Digest: sha(rootfs), URL: originURL + "/" + sha(rootfs)},
		},
	}
	if err := cl.Create(ctx, f.image); err != nil {
		t.Fatalf("creating BootImage: %v", err)
	}
	pool := &kubefarmv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: nsObj.Name, Name: "farm"},
		Spec: kubefarmv1.NodePoolSpec{
			Cluster: "c1", BootImage: f.image.Name,
			Network: kubefarmv1.BootNetwork{
				Subnet: subnet, Gateway: lanIP, DNS: dnsServers, Domain: domain,
				LeaseTime:    &metav1.Duration{Duration: leaseTime},
				DynamicRange: &kubefarmv1.DynamicRange{Start: rangeStart, End: rangeEnd},
			},
			KernelArgs: []string{"console=ttyS0"},
			Tags: map[string]kubefarmv1.TagSpec{
				"ntp": {
					KernelArgs:  []string{"ntp=on"},
					DHCPOptions: []kubefarmv1.DHCPOption{{Code: 42, Value: "0x" + hex.EncodeToString(ntpOption)}},
				},
			},
		},
	}
	for _, m := range machines {
		pool.Spec.Machines = append(pool.Spec.Machines, kubefarmv1.MachineEntry{Name: m.name, MACs: m.macs, IP: m.ip, Tags: m.tags})
	}
	if err := cl.Create(ctx, pool); err != nil {
		t.Fatalf("creating NodePool: %v", err)
	}
	for _, m := range machines {
		obj := &kubefarmv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: nsObj.Name, Name: m.name},
			Spec: kubefarmv1.MachineSpec{
				Pool: pool.Name, Cluster: "c1", Hostname: m.name, MACs: m.macs, IP: m.ip, Tags: m.tags, DesiredImage: f.image.Name,
			},
		}
		if err := cl.Create(ctx, obj); err != nil {
			t.Fatalf("creating Machine %s: %v", m.name, err)
		}
		obj.Status.ServedImage = &kubefarmv1.ImageRef{Name: f.image.Name, Digest: f.image.Spec.Rootfs.Digest}
		if err := cl.Status().Update(ctx, obj); err != nil {
			t.Fatalf("pinning Machine %s's served image: %v", m.name, err)
		}
	}
}

// clientOptions are the options that make a request look like kind.
func clientOptions(kind clientKind) []dhcpv4.Modifier {
	prl := dhcpv4.WithRequestedOptions(dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter, dhcpv4.OptionDomainNameServer,
		dhcpv4.OptionHostName, dhcpv4.OptionDomainName, dhcpv4.OptionBootfileName, dhcpv4.OptionTFTPServerName, dhcpv4.OptionNTPServers)
	switch kind {
	case iPXE:
		return []dhcpv4.Modifier{prl, dhcpv4.WithOption(dhcpv4.OptClientArch(iana.INTEL_X86PC)),
			dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001")),
			dhcpv4.WithOption(dhcpv4.OptGeneric(dhcpv4.OptionUserClassInformation, []byte("iPXE")))}
	case biosROM:
		return []dhcpv4.Modifier{prl, dhcpv4.WithOption(dhcpv4.OptClientArch(iana.INTEL_X86PC)),
			dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001"))}
	default:
		uuid := append([]byte{0}, bytes.Repeat([]byte{0x78}, 16)...)
		return []dhcpv4.Modifier{prl, dhcpv4.WithOption(dhcpv4.OptClientArch(iana.EFI_BC)),
			dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00007:UNDI:003016")),
			dhcpv4.WithOption(dhcpv4.OptGeneric(dhcpv4.OptionClientMachineIdentifier, uuid))}
	}
}

func (f *farm) send(t *testing.T, p *dhcpv4.DHCPv4) {
	t.Helper()
	if _, err := f.conn.WriteTo(p.ToBytes(), &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ServerPort}); err != nil {
		t.Fatal(err)
	}
}

// await receives replies with xid until done says it has what it needs.
func (f *farm) await(ctx context.Context, t *testing.T, xid dhcpv4.TransactionID, what string, done func([]reply) bool) []reply {
	t.Helper()
	var got []reply
	for !done(got) {
		select {
		case r := <-f.replies:
			if r.pkt.TransactionID == xid {
				got = append(got, r)
			}
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v; got %d replies: %s", what, ctx.Err(), len(got), summaries(got))
		}
	}
	return got
}

// drain returns the replies with xid already received, without waiting.
func (f *farm) drain(xid dhcpv4.TransactionID) []reply {
	var got []reply
	for {
		select {
		case r := <-f.replies:
			if r.pkt.TransactionID == xid {
				got = append(got, r)
			}
		default:
			return got
		}
	}
}

func summaries(rs []reply) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "\n  from %s: %s", r.src, r.pkt.Summary())
	}
	return b.String()
}

// identical: one DISCOVER, an OFFER from each replica, identical but for
// each replica's own address; a REQUEST selecting one replica, an ACK from
// it and silence from the other.
func (f *farm) identical(ctx context.Context, t *testing.T, m machine) {
	hw, _ := net.ParseMAC(m.mac)
	before := f.counters(ctx, t)

	disc, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(hw), dhcpv4.WithBroadcast(true),
		dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover)}, clientOptions(m.kind)...)...)
	if err != nil {
		t.Fatal(err)
	}
	f.send(t, disc)
	octx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	offers := f.await(octx, t, disc.TransactionID, "an OFFER from each replica", func(rs []reply) bool {
		seen := map[string]bool{}
		for _, r := range rs {
			seen[r.src.IP.String()] = true
		}
		return seen[f.replicas[0].ip] && seen[f.replicas[1].ip]
	})
	// Each replica counts a packet after sending its reply: once both have
	// counted this DISCOVER, every reply to it has been sent.
	after := f.waitCounted(ctx, t, before, "DISCOVER", 1)
	for i, r := range f.replicas {
		if d := after[i].delta(before[i], "DISCOVER", "offered"); d != 1 {
			t.Errorf("replica %s counted %v DISCOVERs offered, want 1 (all: %v)", r.name, d, after[i].deltas(before[i]))
		}
	}
	offers = append(offers, f.drain(disc.TransactionID)...)
	if len(offers) != 2 {
		t.Fatalf("%d replies to one DISCOVER, want exactly 2:%s", len(offers), summaries(offers))
	}
	byReplica := [2]*dhcpv4.DHCPv4{}
	for _, o := range offers {
		i := f.replicaAt(o.src.IP)
		if i < 0 || byReplica[i] != nil {
			t.Fatalf("replies:%s", summaries(offers))
		}
		if o.pkt.MessageType() != dhcpv4.MessageTypeOffer {
			t.Fatalf("replica %s answered the DISCOVER with %s", f.replicas[i].name, o.pkt.MessageType())
		}
		byReplica[i] = o.pkt
	}
	f.checkValues(t, m, byReplica[0], f.replicas[0])
	f.checkValues(t, m, byReplica[1], f.replicas[1])
	na, nb := normalize(byReplica[0], f.replicas[0].ip), normalize(byReplica[1], f.replicas[1].ip)
	if diff := diffFields(na, nb); diff != "" {
		t.Errorf("the replicas' OFFERs to %s (%s) differ beyond their own address:%s", m.name, m.kind, diff)
	} else {
		t.Logf("OFFERs of A and B to %s (%s) agree in all %d fields compared:%s", m.name, m.kind, len(na), render(na))
	}
	f.sameScript(ctx, t, m)

	// REQUEST in SELECTING state, naming one replica.
	sel, other := f.replicas[m.selects], f.replicas[1-m.selects]
	offer := byReplica[m.selects]
	before = after
	req, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(hw), dhcpv4.WithBroadcast(true),
		dhcpv4.WithTransactionID(disc.TransactionID), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.ParseIP(sel.ip))),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(offer.YourIPAddr))}, clientOptions(m.kind)...)...)
	if err != nil {
		t.Fatal(err)
	}
	f.send(t, req)
	acks := f.await(octx, t, req.TransactionID, "the ACK of replica "+sel.name, func(rs []reply) bool {
		for _, r := range rs {
			if r.src.IP.Equal(net.ParseIP(sel.ip)) {
				return true
			}
		}
		return false
	})
	after = f.waitCounted(ctx, t, before, "REQUEST", 1)
	if d := after[m.selects].delta(before[m.selects], "REQUEST", "acked"); d != 1 {
		t.Errorf("replica %s counted %v REQUESTs acked, want 1 (all: %v)", sel.name, d, after[m.selects].deltas(before[m.selects]))
	}
	if d := after[1-m.selects].delta(before[1-m.selects], "REQUEST", "ignored_other_server"); d != 1 {
		t.Errorf("replica %s counted %v REQUESTs ignored as another server's, want 1 (all: %v)", other.name, d,
			after[1-m.selects].deltas(before[1-m.selects]))
	}
	acks = append(acks, f.drain(req.TransactionID)...)
	if len(acks) != 1 {
		t.Fatalf("%d replies to a REQUEST naming replica %s, want its ACK alone:%s", len(acks), sel.name, summaries(acks))
	}
	ack := acks[0].pkt
	if ack.MessageType() != dhcpv4.MessageTypeAck {
		t.Fatalf("replica %s answered the REQUEST with %s", sel.name, ack.Summary())
	}
	f.checkValues(t, m, ack, sel)
	no, nk := normalize(offer, sel.ip), normalize(ack, sel.ip)
	delete(no, "option 53")
	delete(nk, "option 53")
	if diff := diffFields(no, nk); diff != "" {
		t.Errorf("replica %s's ACK to %s differs from its OFFER:%s", sel.name, m.name, diff)
	}
	f.leasedFrom[m.name] = m.selects
	t.Logf("REQUEST naming %s: ACK %s from %s, %s silent", sel.name, ack.YourIPAddr, sel.name, other.name)
}

// checkValues asserts what the API objects say a reply to m must carry,
// and that the per-replica fields are r's own address.
func (f *farm) checkValues(t *testing.T, m machine, p *dhcpv4.DHCPv4, r *replica) {
	t.Helper()
	own := net.ParseIP(r.ip).To4()
	errf := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s from replica %s to %s: "+format, append([]any{p.MessageType(), r.name, m.name}, args...)...)
	}
	if sid := p.ServerIdentifier(); !sid.Equal(own) {
		errf("server identifier %v, want %s", sid, own)
	}
	if !p.YourIPAddr.Equal(net.ParseIP(m.ip)) {
		errf("yiaddr %s, want %s", p.YourIPAddr, m.ip)
	}
	if mask := p.SubnetMask(); mask.String() != net.CIDRMask(24, 32).String() {
		errf("subnet mask %v", mask)
	}
	if rt := p.Router(); len(rt) != 1 || !rt[0].Equal(net.ParseIP(lanIP)) {
		errf("router %v, want %s", rt, lanIP)
	}
	if dns := p.DNS(); fmt.Sprint(dns) != fmt.Sprint([]net.IP{net.ParseIP(dnsServers[0]).To4(), net.ParseIP(dnsServers[1]).To4()}) {
		errf("DNS %v, want %v", dns, dnsServers)
	}
	if d := p.DomainName(); d != domain {
		errf("domain %q", d)
	}
	if h := p.HostName(); h != m.name {
		errf("hostname %q", h)
	}
	if lt := p.IPAddressLeaseTime(0); lt != leaseTime {
		errf("lease time %s, want %s", lt, leaseTime)
	}
	ntp := p.Options.Get(dhcpv4.OptionNTPServers)
	if len(m.tags) > 0 != (ntp != nil) || ntp != nil && !bytes.Equal(ntp, ntpOption) {
		errf("option 42 %x (tags %v)", ntp, m.tags)
	}
	file, opt67 := p.BootFileName, string(p.Options.Get(dhcpv4.OptionBootfileName))
	tftpName := string(p.Options.Get(dhcpv4.OptionTFTPServerName))
	switch m.kind {
	case iPXE:
		want := r.base() + "/boot/" + m.mac + ".ipxe"
		if file != want || opt67 != want {
			errf("boot file %q / option 67 %q, want %q", file, opt67, want)
		}
		if !p.ServerIPAddr.IsUnspecified() || tftpName != "" {
			errf("siaddr %s, option 66 %q for an HTTP boot", p.ServerIPAddr, tftpName)
		}
	case biosROM, uefiFirm:
		want := "undionly.kpxe"
		if m.kind == uefiFirm {
			want = "ipxe.efi"
		}
		if file != want || opt67 != want {
			errf("boot file %q / option 67 %q, want %q", file, opt67, want)
		}
		if !p.ServerIPAddr.Equal(own) || tftpName != r.ip {
			errf("siaddr %s, option 66 %q, want its own address %s", p.ServerIPAddr, tftpName, r.ip)
		}
	}
}

// normalize renders every header field and option of p, with replica's own
// address (the per-replica fields) replaced by <self>. Option 54 is the
// identity itself and is left out; checkValues asserts it.
func normalize(p *dhcpv4.DHCPv4, self string) map[string]string {
	sub := func(s string) string { return strings.ReplaceAll(s, self, "<self>") }
	f := map[string]string{
		"op":     p.OpCode.String(),
		"htype":  p.HWType.String(),
		"hops":   strconv.Itoa(int(p.HopCount)),
		"xid":    p.TransactionID.String(),
		"secs":   strconv.Itoa(int(p.NumSeconds)),
		"flags":  strconv.Itoa(int(p.Flags)),
		"ciaddr": p.ClientIPAddr.String(),
		"yiaddr": p.YourIPAddr.String(),
		"siaddr": sub(p.ServerIPAddr.String()),
		"giaddr": p.GatewayIPAddr.String(),
		"chaddr": p.ClientHWAddr.String(),
		"sname":  p.ServerHostName,
		"file":   sub(p.BootFileName),
	}
	for code, v := range p.Options {
		if code == dhcpv4.OptionServerIdentifier.Code() {
			continue
		}
		s := fmt.Sprintf("%x", v)
		if printable(v) {
			s = strconv.Quote(string(v))
		}
		f["option "+strconv.Itoa(int(code))] = sub(s)
	}
	return f
}

func printable(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

func diffFields(a, b map[string]string) string {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var out []string
	for k := range keys {
		va, oka := a[k]
		vb, okb := b[k]
		if oka != okb || va != vb {
			out = append(out, fmt.Sprintf("\n  %s: A=%q (present %v) B=%q (present %v)", k, va, oka, vb, okb))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "")
}

func render(f map[string]string) string {
	var out []string
	for k, v := range f {
		out = append(out, "\n  "+k+" = "+v)
	}
	sort.Strings(out)
	return strings.Join(out, "")
}

// sameScript: both replicas serve m the same iPXE script, up to their own
// base URL.
func (f *farm) sameScript(ctx context.Context, t *testing.T, m machine) {
	t.Helper()
	var scripts [2]string
	for i, r := range f.replicas {
		body, err := f.get(ctx, f.lanHTTP, r.base()+"/boot/"+m.mac+".ipxe")
		if err != nil {
			t.Fatalf("replica %s: %v", r.name, err)
		}
		scripts[i] = strings.ReplaceAll(string(body), r.base(), "<self>")
	}
	if scripts[0] != scripts[1] {
		t.Errorf("the replicas' iPXE scripts for %s differ:\nA:\n%s\nB:\n%s", m.name, scripts[0], scripts[1])
	}
	if !strings.Contains(scripts[0], "\nkernel <self>/artifacts/"+f.image.Spec.Kernel.Digest+" ") {
		t.Errorf("script for %s:\n%s", m.name, scripts[0])
	}
}

func (f *farm) get(ctx context.Context, hc *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", u, resp.Status, body)
	}
	return body, nil
}

func (f *farm) replicaAt(ip net.IP) int {
	for i, r := range f.replicas {
		if ip.Equal(net.ParseIP(r.ip)) {
			return i
		}
	}
	return -1
}

// counters is one scrape of kubefarm_pxe_dhcp_packets_total: {type,
// result} -> value.
type counters map[[2]string]float64

var packetLine = regexp.MustCompile(`^kubefarm_pxe_dhcp_packets_total\{result="([^"]*)",type="([^"]*)"\} (\S+)$`)

func (c counters) delta(before counters, typ, result string) float64 {
	return c[[2]string{typ, result}] - before[[2]string{typ, result}]
}

// handled is how many packets of typ the replica finished with, whatever
// it did with them.
func (c counters) handled(typ string) float64 {
	n := 0.0
	for k, v := range c {
		if k[0] == typ {
			n += v
		}
	}
	return n
}

func (c counters) deltas(before counters) map[string]float64 {
	out := map[string]float64{}
	for k, v := range c {
		if d := v - before[k]; d != 0 {
			out[k[0]+"/"+k[1]] = d
		}
	}
	return out
}

func (f *farm) scrape(ctx context.Context, r *replica) (counters, error) {
	body, err := f.get(ctx, f.lanHTTP, r.probes()+"/metrics")
	if err != nil {
		return nil, err
	}
	c := counters{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if m := packetLine.FindStringSubmatch(sc.Text()); m != nil {
			v, err := strconv.ParseFloat(m[3], 64)
			if err != nil {
				return nil, err
			}
			c[[2]string{m[2], m[1]}] = v
		}
	}
	return c, sc.Err()
}

// counters scrapes every live replica (a dead one's slot stays nil).
func (f *farm) counters(ctx context.Context, t *testing.T) [2]counters {
	t.Helper()
	var out [2]counters
	for i, r := range f.replicas {
		if done, _ := r.pxe.Exited(); done {
			continue
		}
		c, err := f.scrape(ctx, r)
		if err != nil {
			t.Fatalf("metrics of replica %s: %v", r.name, err)
		}
		out[i] = c
	}
	return out
}

// waitCounted waits until every live replica has counted n more packets of
// typ than in before, and returns the scrape that showed it.
func (f *farm) waitCounted(ctx context.Context, t *testing.T, before [2]counters, typ string, n float64) [2]counters {
	t.Helper()
	var after [2]counters
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		for i, r := range f.replicas {
			if before[i] == nil {
				continue
			}
			c, err := f.scrape(ctx, r)
			if err != nil {
				return false, err
			}
			after[i] = c
			if c.handled(typ)-before[i].handled(typ) < n {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("waiting for the replicas to count %v %s: %v (A: %v, B: %v)", n, typ, err,
			after[0].deltas(before[0]), after[1].deltas(before[1]))
	}
	for i, r := range f.replicas {
		if before[i] != nil && after[i].handled(typ)-before[i].handled(typ) != n {
			t.Errorf("replica %s counted %v %s, want %v", r.name, after[i].handled(typ)-before[i].handled(typ), typ, n)
		}
	}
	return after
}

// killOne kills replica A, then boots through B with real clients and
// rebinds a lease A gave.
func (f *farm) killOne(ctx context.Context, t *testing.T) {
	a, b := f.replicas[0], f.replicas[1]
	killed := time.Now()
	err := a.pxe.Kill()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ProcessState.String() != "signal: killed" {
		t.Fatalf("replica A after SIGKILL: %v", err)
	}
	t.Logf("replica A killed (%v) in %s", err, time.Since(killed).Round(time.Millisecond))

	// A machine whose lease came from A rebinds: its lease's T2 passed
	// with A unreachable, so it broadcasts a REQUEST with ciaddr and no
	// server identifier (RFC 2131 4.4.5), from its configured address.
	t.Run("RebindLeaseOfA", func(t *testing.T) {
		m := machines[0]
		if f.leasedFrom[m.name] != 0 {
			t.Fatalf("%s's lease is not from A", m.name)
		}
		f.rebind(ctx, t, m, b)
	})

	// A stranger's lease lives in the API, not in the replica that gave
	// it. Ack alone cannot show that: an INIT-REBOOT for a free address of
	// the range is granted (claimed) to anyone. So B must refuse the
	// address to another MAC, and confirm it to the stranger (INIT-REBOOT
	// after a restart of the client: option 50, no server identifier)
	// without writing: the expiry A's ACK wrote leaves more than half the
	// lease time, and B found it in the API. Had A's ACK not been there, B
	// would have extended (rewritten) or claimed the lease. The REQUEST
	// carries a hostname (option 12), which any write records: without it
	// a rewrite within the second of A's ACK would store the same object
	// (expireTime has whole seconds) and keep its resourceVersion.
	t.Run("DynamicLeaseOfAFromB", func(t *testing.T) {
		if f.dynamicLease == nil {
			t.Fatal("DynamicRange left no acknowledged address to confirm")
		}
		ip := f.dynamicIP
		request := func(mac net.HardwareAddr, want dhcpv4.MessageType, result string, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
			t.Helper()
			before := f.counters(ctx, t)
			req := f.dhcp(t, dhcpv4.MessageTypeRequest, mac, append(mods, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip)))...)
			rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			got := f.await(rctx, t, req.TransactionID, "B's "+want.String(), func(rs []reply) bool { return len(rs) > 0 })
			after := f.waitCounted(ctx, t, before, "REQUEST", 1)
			got = append(got, f.drain(req.TransactionID)...)
			if len(got) != 1 || got[0].pkt.MessageType() != want || !got[0].src.IP.Equal(net.ParseIP(b.ip)) {
				t.Fatalf("INIT-REBOOT of %s for %s:%s\n  want one %s from B", mac, ip, summaries(got), want)
			}
			if d := after[1].delta(before[1], "REQUEST", result); d != 1 {
				t.Errorf("replica B counted %v REQUESTs %s, want 1 (all: %v)", d, result, after[1].deltas(before[1]))
			}
			return got[0].pkt
		}
		request(latecomer, dhcpv4.MessageTypeNak, "nak")
		ack := request(stranger1, dhcpv4.MessageTypeAck, "acked", dhcpv4.WithOption(dhcpv4.OptHostName("rebooted")))
		if !ack.YourIPAddr.Equal(ip) || !ack.ServerIdentifier().Equal(net.ParseIP(b.ip)) || ack.IPAddressLeaseTime(0) != leaseTime {
			t.Errorf("B's ACK of %s's INIT-REBOOT: %s; want %s, server B, lease %s", stranger1, ack.Summary(), ip, leaseTime)
		}
		ls := f.leasesOf(ctx, t, stranger1)
		if len(ls) != 1 {
			t.Fatalf("DHCPLeases of %s after B's ACK: %+v", stranger1, ls)
		}
		was := f.dynamicLease
		if ls[0].UID != was.UID || ls[0].ResourceVersion != was.ResourceVersion || !ls[0].Spec.ExpireTime.Equal(&was.Spec.ExpireTime) ||
			ls[0].Spec.Hostname != was.Spec.Hostname {
			t.Errorf("B rewrote the lease A acknowledged: uid %s rv %s expires %s hostname %q, was uid %s rv %s expires %s hostname %q",
				ls[0].UID, ls[0].ResourceVersion, ls[0].Spec.ExpireTime, ls[0].Spec.Hostname,
				was.UID, was.ResourceVersion, was.Spec.ExpireTime, was.Spec.Hostname)
		}
		t.Logf("after A's death, B refused %s to %s (NAK) and confirmed it to %s from the lease A wrote (rv %s, unchanged)",
			ip, latecomer, stranger1, was.ResourceVersion)
	})

	// A new boot through B with busybox: the PXE ROM stage (DHCP, TFTP),
	// then the iPXE stage (DHCP, the script, the kernel it names).
	t.Run("BootThroughB", func(t *testing.T) {
		m := machines[2] // leased from A above
		node := netnstest.New(t, "kfrep-node")
		netnstest.Attach(t, f.lan, bridge, "kfrepN", node, ifname, m.macs[0], "")
		hc := netnstest.HTTPClient(node)

		rom := f.udhcpc(ctx, t, node, "-V", "PXEClient:Arch:00000:UNDI:002001", "-x", "0x5d:0000")
		for k, want := range map[string]string{
			"ip": m.ip, "serverid": b.ip, "siaddr": b.ip, "boot_file": "undionly.kpxe", "tftp": b.ip,
			"hostname": m.name, "lease": strconv.Itoa(int(leaseTime / time.Second)), "subnet": "255.255.255.0", "router": lanIP,
		} {
			if got := strings.TrimSpace(rom[k]); got != want {
				t.Errorf("ROM stage: udhcpc %s = %q, want %q", k, got, want)
			}
		}
		// TFTP from the lease's next server.
		dst := filepath.Join(t.TempDir(), "nbp")
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(tctx, "ip", "netns", "exec", node, "busybox", "tftp", "-g",
			"-r", rom["boot_file"], "-l", dst, rom["siaddr"]).CombinedOutput(); err != nil {
			t.Fatalf("tftp %s from %s: %v\n%s", rom["boot_file"], rom["siaddr"], err, out)
		}
		got, _ := os.ReadFile(dst)
		want, err := os.ReadFile(filepath.Join(ipxeDir, "undionly.kpxe"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("TFTP undionly.kpxe: %d bytes, want the %d of %s", len(got), len(want), ipxeDir)
		}

		// iPXE: option 77 "iPXE" (hex: busybox takes numeric codes as hex).
		ipxe := f.udhcpc(ctx, t, node, "-V", "PXEClient:Arch:00000:UNDI:002001", "-x", "0x5d:0000",
			"-x", "0x4d:"+hex.EncodeToString([]byte("iPXE")))
		script := b.base() + "/boot/" + m.macs[0] + ".ipxe"
		if ipxe["ip"] != m.ip || ipxe["serverid"] != b.ip || ipxe["boot_file"] != script {
			t.Fatalf("iPXE stage: udhcpc ip %q serverid %q boot_file %q, want %s, %s, %s",
				ipxe["ip"], ipxe["serverid"], ipxe["boot_file"], m.ip, b.ip, script)
		}
		body, err := f.get(ctx, hc, ipxe["boot_file"])
		if err != nil {
			t.Fatalf("fetching the script from the lease's boot URL: %v", err)
		}
		var kernelURL string
		for _, l := range strings.Split(string(body), "\n") {
			if rest, ok := strings.CutPrefix(l, "kernel "); ok {
				kernelURL, _, _ = strings.Cut(rest, " ")
			}
		}
		if !strings.HasPrefix(kernelURL, b.base()+"/artifacts/") {
			t.Fatalf("script from B names kernel %q:\n%s", kernelURL, body)
		}
		k, err := f.get(ctx, hc, kernelURL)
		if err != nil {
			t.Fatalf("fetching the kernel the script names: %v", err)
		}
		if !bytes.Equal(k, f.kernel) {
			t.Errorf("kernel from B: %d bytes, not the image's", len(k))
		}
		t.Logf("%s booted through B: ROM lease %s from %s, TFTP %s (%d bytes), iPXE lease, script %s, kernel %d bytes",
			m.name, rom["ip"], rom["serverid"], rom["boot_file"], len(got), ipxe["boot_file"], len(k))
	})
}

// rebind sends m's REBINDING REQUEST from the probe namespace, now holding
// m's address, and expects the ACK of r, the one live replica.
func (f *farm) rebind(ctx context.Context, t *testing.T, m machine, r *replica) {
	t.Helper()
	netnstest.Run(t, "ip", "-n", f.probe, "addr", "add", m.ip+"/24", "dev", ifname)
	hw, _ := net.ParseMAC(m.mac)
	before := f.counters(ctx, t)
	req, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(hw), dhcpv4.WithClientIP(net.ParseIP(m.ip)),
		dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest)}, clientOptions(m.kind)...)...)
	if err != nil {
		t.Fatal(err)
	}
	f.send(t, req)
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	got := f.await(rctx, t, req.TransactionID, "an ACK to "+m.name+"'s REBINDING REQUEST", func(rs []reply) bool { return len(rs) > 0 })
	after := f.waitCounted(ctx, t, before, "REQUEST", 1)
	if d := after[1].delta(before[1], "REQUEST", "acked"); d != 1 {
		t.Errorf("replica %s counted %v REQUESTs acked (all: %v)", r.name, d, after[1].deltas(before[1]))
	}
	got = append(got, f.drain(req.TransactionID)...)
	if len(got) != 1 || !got[0].src.IP.Equal(net.ParseIP(r.ip)) {
		t.Fatalf("replies to %s's REBINDING REQUEST, want one from replica %s:%s", m.name, r.name, summaries(got))
	}
	ack := got[0].pkt
	if ack.MessageType() != dhcpv4.MessageTypeAck || !ack.YourIPAddr.Equal(net.ParseIP(m.ip)) {
		t.Fatalf("REBINDING REQUEST of %s: %s", m.name, ack.Summary())
	}
	f.checkValues(t, m, ack, r)
	t.Logf("%s rebound %s (lease from A) at %s: ACK %s (unicast to ciaddr), lease %s", m.name, m.ip, r.name, ack.YourIPAddr,
		ack.IPAddressLeaseTime(0))
}

// udhcpc obtains one lease in ns with busybox udhcpc and returns the
// environment its script saw when bound; the address is configured, as a
// real client's would be.
func (f *farm) udhcpc(ctx context.Context, t *testing.T, ns string, extra ...string) map[string]string {
	t.Helper()
	uctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	env, out, err := netnstest.Udhcpc(uctx, ns, ifname, netnstest.UdhcpcOptions{Configure: true, Args: extra})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return env
}

// dhcp sends one broadcast request of type mt from mac, as a BIOS PXE ROM.
func (f *farm) dhcp(t *testing.T, mt dhcpv4.MessageType, mac net.HardwareAddr, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()
	p, err := dhcpv4.New(append(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(mac), dhcpv4.WithBroadcast(true),
		dhcpv4.WithMessageType(mt)}, clientOptions(biosROM)...), mods...)...)
	if err != nil {
		t.Fatal(err)
	}
	f.send(t, p)
	return p
}

// offersFromBoth sends a DISCOVER from mac and returns each replica's
// OFFER, by replica index, once both have counted the DISCOVER.
func (f *farm) offersFromBoth(ctx context.Context, t *testing.T, mac net.HardwareAddr) (*dhcpv4.DHCPv4, [2]*dhcpv4.DHCPv4) {
	t.Helper()
	before := f.counters(ctx, t)
	disc := f.dhcp(t, dhcpv4.MessageTypeDiscover, mac)
	octx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	got := f.await(octx, t, disc.TransactionID, "an OFFER from each replica", func(rs []reply) bool { return len(rs) >= 2 })
	after := f.waitCounted(ctx, t, before, "DISCOVER", 1)
	got = append(got, f.drain(disc.TransactionID)...)
	var by [2]*dhcpv4.DHCPv4
	for _, r := range got {
		i := f.replicaAt(r.src.IP)
		if i < 0 || by[i] != nil || r.pkt.MessageType() != dhcpv4.MessageTypeOffer {
			t.Fatalf("replies to a stranger's DISCOVER:%s", summaries(got))
		}
		by[i] = r.pkt
	}
	for i, r := range f.replicas {
		if by[i] == nil {
			t.Fatalf("no OFFER from replica %s (its counts: %v):%s", r.name, after[i].deltas(before[i]), summaries(got))
		}
	}
	return disc, by
}

// leasesOf lists the DHCPLeases of mac in the pool's namespace.
func (f *farm) leasesOf(ctx context.Context, t *testing.T, mac net.HardwareAddr) []kubefarmv1.DHCPLease {
	t.Helper()
	var l kubefarmv1.DHCPLeaseList
	if err := f.api.List(ctx, &l, client.InNamespace(f.poolNS)); err != nil {
		t.Fatal(err)
	}
	var out []kubefarmv1.DHCPLease
	for _, o := range l.Items {
		if o.Spec.MAC == mac.String() {
			out = append(out, o)
		}
	}
	return out
}

// dynamicRange: MACs of no Machine. Both replicas offer the first the same
// address of the range, the one its search order gives, stored as one
// DHCPLease held for the offer hold; the REQUEST naming A is ACKed by A
// alone and extends that lease to the pool's lease time; the second MAC,
// whose search starts on a static machine's address, gets the next free
// one. Five more strangers take the rest of the range, each the address
// its search order gives, and the next finds it full: at that point every
// non-static address of the range is leased and no static one is.
func (f *farm) dynamicRange(ctx context.Context, t *testing.T) {
	a := f.replicas[0]
	// The MACs are chosen for what they exercise; say so if they do not.
	if s := rangeAddr(firstOffset(stranger1)); isStaticIP(s) {
		t.Fatalf("test set-up: %s's search starts at the static %s; pick a MAC that starts on a free address", stranger1, s)
	}
	if s := rangeAddr(firstOffset(stranger2)); !isStaticIP(s) {
		t.Fatalf("test set-up: %s's search starts at %s, no static machine's; pick a MAC that exercises the skip", stranger2, s)
	}
	taken := map[string]bool{} // addresses leased to strangers so far

	// 1-2. One DISCOVER, seen by both: the same OFFER, one DHCPLease.
	want := expectedAddr(stranger1, taken)
	disc, offers := f.offersFromBoth(ctx, t, stranger1)
	ip := offers[0].YourIPAddr
	if ip.String() != want || !offers[1].YourIPAddr.Equal(ip) {
		t.Fatalf("stranger %s offered %s by A and %s by B, want %s (first free address of its search order in %s-%s)",
			stranger1, ip, offers[1].YourIPAddr, want, rangeStart, rangeEnd)
	}
	na, nb := normalize(offers[0], f.replicas[0].ip), normalize(offers[1], f.replicas[1].ip)
	if diff := diffFields(na, nb); diff != "" {
		t.Fatalf("the replicas' OFFERs to a stranger differ beyond their own address:%s", diff)
	}
	for i, o := range offers {
		if sid := o.ServerIdentifier(); !sid.Equal(net.ParseIP(f.replicas[i].ip)) {
			t.Errorf("replica %s's OFFER to a stranger names server %v", f.replicas[i].name, sid)
		}
	}
	if _, ok := na["option 12"]; ok {
		t.Errorf("a stranger was offered a hostname: %s", na["option 12"])
	}
	offered := f.leasesOf(ctx, t, stranger1)
	if len(offered) != 1 || offered[0].Spec.IP != ip.String() {
		t.Fatalf("DHCPLeases of %s after both replicas offered: %+v, want exactly one for %s", stranger1, offered, ip)
	}
	// An offer holds the address briefly, not for a lease time.
	if left := time.Until(offered[0].Spec.ExpireTime.Time); left > dynamic.DefaultOfferHold+5*time.Second {
		t.Errorf("the offered lease expires in %s, want at most the offer hold %s", left, dynamic.DefaultOfferHold)
	}
	t.Logf("both replicas offered %s to %s, agreeing in all %d fields compared; one DHCPLease %s", ip, stranger1, len(na), offered[0].Name)

	// 3. The REQUEST naming A: A ACKs, B stays silent, the lease is extended.
	before := f.counters(ctx, t)
	req := f.dhcp(t, dhcpv4.MessageTypeRequest, stranger1, dhcpv4.WithTransactionID(disc.TransactionID),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.ParseIP(a.ip))), dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip)))
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	acks := f.await(rctx, t, req.TransactionID, "A's ACK", func(rs []reply) bool { return len(rs) > 0 })
	after := f.waitCounted(ctx, t, before, "REQUEST", 1)
	acks = append(acks, f.drain(req.TransactionID)...)
	if len(acks) != 1 || acks[0].pkt.MessageType() != dhcpv4.MessageTypeAck || !acks[0].src.IP.Equal(net.ParseIP(a.ip)) ||
		!acks[0].pkt.YourIPAddr.Equal(ip) {
		t.Fatalf("REQUEST naming A for %s:%s, want A's ACK alone", ip, summaries(acks))
	}
	if d := after[0].delta(before[0], "REQUEST", "acked"); d != 1 {
		t.Errorf("replica A counted %v REQUESTs acked, want 1 (all: %v)", d, after[0].deltas(before[0]))
	}
	if d := after[1].delta(before[1], "REQUEST", "ignored_other_server"); d != 1 {
		t.Errorf("replica B counted %v REQUESTs ignored as another server's, want 1 (all: %v)", d, after[1].deltas(before[1]))
	}
	if lt := acks[0].pkt.IPAddressLeaseTime(0); lt != leaseTime {
		t.Errorf("A's ACK to a stranger: lease time %s, want the pool's %s", lt, leaseTime)
	}
	no, nk := normalize(offers[0], a.ip), normalize(acks[0].pkt, a.ip)
	delete(no, "option 53")
	delete(nk, "option 53")
	if diff := diffFields(no, nk); diff != "" {
		t.Errorf("A's ACK to a stranger differs from its OFFER:%s", diff)
	}
	ls := f.leasesOf(ctx, t, stranger1)
	if len(ls) != 1 || ls[0].UID != offered[0].UID {
		t.Fatalf("DHCPLeases of %s after the ACK: %+v, want the offered one (uid %s), extended", stranger1, ls, offered[0].UID)
	}
	if left := time.Until(ls[0].Spec.ExpireTime.Time); left < leaseTime-time.Minute || left > leaseTime+time.Minute {
		t.Errorf("the ACKed lease expires in %s, want about the pool's %s", left, leaseTime)
	}
	f.dynamicIP, f.dynamicLease = ip, &ls[0]
	taken[ip.String()] = true

	// 4. A second stranger, whose search starts on a static address.
	want2 := expectedAddr(stranger2, taken)
	_, offers2 := f.offersFromBoth(ctx, t, stranger2)
	ip2 := offers2[0].YourIPAddr
	if ip2.String() != want2 || !offers2[1].YourIPAddr.Equal(ip2) {
		t.Fatalf("second stranger offered %s by A and %s by B, want %s (its search starts at the static %s; %s is taken)",
			ip2, offers2[1].YourIPAddr, want2, rangeAddr(firstOffset(stranger2)), ip)
	}
	if ls := f.leasesOf(ctx, t, stranger2); len(ls) != 1 || ls[0].Spec.IP != want2 {
		t.Fatalf("DHCPLeases of %s: %+v, want exactly one for %s", stranger2, ls, want2)
	}
	taken[want2] = true
	t.Logf("A acknowledged %s to %s (expires in %s); %s, starting at the static %s, was offered %s", ip, stranger1,
		time.Until(ls[0].Spec.ExpireTime.Time).Round(time.Second), stranger2, rangeAddr(firstOffset(stranger2)), ip2)

	// The rest of the range, then one stranger too many.
	for _, mac := range fillers {
		want := expectedAddr(mac, taken)
		if want == "" {
			t.Fatalf("test set-up: no free address left for %s", mac)
		}
		_, o := f.offersFromBoth(ctx, t, mac)
		if o[0].YourIPAddr.String() != want || !o[1].YourIPAddr.Equal(o[0].YourIPAddr) {
			t.Fatalf("%s offered %s by A and %s by B, want %s (taken: %v)", mac, o[0].YourIPAddr, o[1].YourIPAddr, want, taken)
		}
		if ls := f.leasesOf(ctx, t, mac); len(ls) != 1 || ls[0].Spec.IP != want {
			t.Fatalf("DHCPLeases of %s: %+v, want exactly one for %s", mac, ls, want)
		}
		taken[want] = true
	}
	if free := expectedAddr(latecomer, taken); free != "" {
		t.Fatalf("test set-up: the fillers leave %s free", free)
	}
	before = f.counters(ctx, t)
	late := f.dhcp(t, dhcpv4.MessageTypeDiscover, latecomer)
	after = f.waitCounted(ctx, t, before, "DISCOVER", 1)
	for i, r := range f.replicas {
		if d := after[i].delta(before[i], "DISCOVER", "ignored_range_full"); d != 1 {
			t.Errorf("replica %s, range full: counted %v DISCOVERs ignored_range_full, want 1 (all: %v)", r.name, d, after[i].deltas(before[i]))
		}
	}
	if got := f.drain(late.TransactionID); len(got) != 0 {
		t.Errorf("replies to a DISCOVER with the range full:%s", summaries(got))
	}
	var all kubefarmv1.DHCPLeaseList
	if err := f.api.List(ctx, &all, client.InNamespace(f.poolNS)); err != nil {
		t.Fatal(err)
	}
	held := map[string]string{}
	for _, l := range all.Items {
		if isStaticIP(l.Spec.IP) || l.Spec.MAC == latecomer.String() || held[l.Spec.IP] != "" {
			t.Errorf("DHCPLease %s: %s for %s (static addresses, the latecomer and duplicates must have none)", l.Name, l.Spec.IP, l.Spec.MAC)
		}
		held[l.Spec.IP] = l.Spec.MAC
	}
	for ip := range taken {
		if held[ip] == "" {
			t.Errorf("with the range full, %s has no DHCPLease", ip)
		}
	}
	if len(held) != len(taken) || len(taken) != rangeSize-len(machines) {
		t.Errorf("with the range full, DHCPLeases hold %v; want the %d non-static addresses %v", held, rangeSize-len(machines), taken)
	}
	t.Logf("%d more strangers took the rest of the range as their search orders say; %s got no OFFER (range full); %d DHCPLeases, none on a static address",
		len(fillers), latecomer, len(all.Items))
}

package discoveryflood

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/testing/netnstest"
	"github.com/kubefarm/kubefarm/internal/testing/procstat"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
)

const (
	maxMachines = 50
	dhcpMACs    = 100
	// dhcpTries: how often one DHCP request is sent before the flood
	// gives up on it, 4 s apart.
	dhcpTries = 4
	httpMACs  = 10000
	// residentTarget bounds the replica's resident set, now and at its
	// peak, with 10,000 DHCPLeases in its cache and the floods done: the
	// operator chart's memory request for kubefarm-pxe (pxe.resources),
	// what the scheduler reserves for it. Measured on a 2-core machine
	// (27 November 2026): 58 MiB once synced, 75 MiB after the floods,
	// 79 MiB at the peak.
	residentTarget = 128 << 20
	// goroutineTarget bounds its goroutines once the floods are over: no
	// request leaves one behind.
	goroutineTarget = 400
	apiAddr         = "127.0.0.1:6443"
	httpAddr        = "127.0.0.1:8080"
	metricsAddr     = "127.0.0.1:9090"
)

// randomMAC is a random unicast, locally administered MAC.
func randomMAC(t *testing.T) net.HardwareAddr {
	mac := make(net.HardwareAddr, 6)
	if _, err := rand.Read(mac); err != nil {
		t.Fatal(err)
	}
	mac[0] = mac[0]&0xfe | 0x02
	return mac
}

func reportBody(mac string) []byte {
	b, _ := json.Marshal(bootproto.DiscoveryReport{MAC: mac, Hardware: kubefarmv1.HardwareFacts{
		MemoryBytes: 4 << 30, CPU: kubefarmv1.CPUFacts{Count: 8, Model: "flood"},
		System: kubefarmv1.SystemFacts{Vendor: "flood", Serial: mac},
		Disks:  []kubefarmv1.DiskFacts{{Name: "sda", SizeBytes: 1 << 40, Serial: "d-" + mac}},
		NICs:   []kubefarmv1.NICFacts{{MAC: mac, Name: "eth0", Driver: "e1000e", SpeedMbps: 1000, Link: true}},
	}})
	return b
}

// post sends one report from src inside ns and returns the status code.
func post(ctx context.Context, ns, src string, body []byte) (int, error) {
	var conn net.Conn
	err := netnstest.Do(ns, func() (err error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
		conn, err = d.DialContext(ctx, "tcp", httpAddr)
		return err
	})
	if err != nil {
		return 0, err
	}
	tr := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return conn, nil }, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+httpAddr+bootproto.DiscoveryPath, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// get fetches url from inside ns; the body, or "" when it does not answer.
func get(ns, url string) (int, string) {
	resp, err := netnstest.HTTPClient(ns).Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric is a sample's value on the replica's /metrics, -1 when absent.
func metric(page, sample string) float64 {
	for _, l := range strings.Split(page, "\n") {
		if rest, ok := strings.CutPrefix(l, sample+" "); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	return -1
}

// dora leases an address for mac from the replica over the namespace's
// loopback and returns it.
func dora(ns string, mac net.HardwareAddr) (net.IP, error) {
	exchange := func(src net.IP, req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, error) {
		var conn net.PacketConn
		if err := netnstest.Do(ns, func() (err error) {
			conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: src})
			return err
		}); err != nil {
			return nil, err
		}
		defer conn.Close()
		// As a DHCP client does, the request goes again when no answer
		// comes: the server gives each allocation 3 s, and on a loaded
		// machine one can run out and go unanswered.
		buf := make([]byte, 1500)
		for try := 1; ; try++ {
			if _, err := conn.WriteTo(req.ToBytes(), &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 67}); err != nil {
				return nil, err
			}
			_ = conn.SetReadDeadline(time.Now().Add(4 * time.Second))
			for {
				n, _, err := conn.ReadFrom(buf)
				if err != nil {
					if try < dhcpTries {
						break
					}
					return nil, fmt.Errorf("no answer to %s of %s in %d tries: %w", req.MessageType(), mac, try, err)
				}
				resp, err := dhcpv4.FromBytes(buf[:n])
				if err == nil && resp.TransactionID == req.TransactionID {
					return resp, nil
				}
			}
		}
	}
	lo := net.IPv4(127, 0, 0, 1)
	disc, err := dhcpv4.NewDiscovery(mac, dhcpv4.WithClientIP(lo))
	if err != nil {
		return nil, err
	}
	offer, err := exchange(lo, disc)
	if err != nil {
		return nil, err
	}
	if offer.MessageType() != dhcpv4.MessageTypeOffer {
		return nil, fmt.Errorf("%s: %s, want an OFFER", mac, offer.MessageType())
	}
	ip := offer.YourIPAddr.To4()
	// RENEWING-style: from the offered address, with it as ciaddr, so the
	// ACK comes back to this socket.
	req, err := dhcpv4.New(dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), dhcpv4.WithHwAddr(mac), dhcpv4.WithClientIP(ip))
	if err != nil {
		return nil, err
	}
	ack, err := exchange(ip, req)
	if err != nil {
		return nil, err
	}
	if ack.MessageType() != dhcpv4.MessageTypeAck || !ack.YourIPAddr.Equal(ip) {
		return nil, fmt.Errorf("%s: %s for %s, want an ACK", mac, ack.MessageType(), ack.YourIPAddr)
	}
	return ip, nil
}

func TestDiscoveryFlood(t *testing.T) {
	netnstest.RequireRoot(t)
	// The replica's log, dumped on failure, is long: the failures are
	// repeated after it.
	fail := netnstest.NewRecap(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	binary := netnstest.BuildPXE(ctx, t)
	env := testenv.StartT(t, testenv.Options{})
	// The test's own writes are many: no client-side throttle.
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		fail.Fatal(err)
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "flood-"}}
	if err := c.Create(ctx, ns); err != nil {
		fail.Fatal(err)
	}
	pool := &kubefarmv1.NodePool{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "strangers"},
		Spec: kubefarmv1.NodePoolSpec{Cluster: "c1", BootImage: "node",
			Network: kubefarmv1.BootNetwork{Subnet: "127.0.0.0/8",
				DynamicRange: &kubefarmv1.DynamicRange{Start: "127.80.0.10", End: "127.80.255.250", UnknownMachines: kubefarmv1.UnknownHold}}}}
	if err := c.Create(ctx, pool); err != nil {
		fail.Fatal(err)
	}

	// The HTTP flood's leases, as the allocator writes them, in the
	// upper half of the range (the DHCP flood's addresses come from the
	// allocator's hash order anywhere in it and skip these).
	type held struct{ mac, ip string }
	flood := make([]held, httpMACs)
	seen := map[string]bool{}
	for i := range flood {
		mac := randomMAC(t).String()
		for seen[mac] {
			mac = randomMAC(t).String()
		}
		seen[mac] = true
		flood[i] = held{mac, fmt.Sprintf("127.80.%d.%d", 128+i/200, 10+i%200)}
	}
	start := time.Now()
	expire := metav1.NewTime(time.Now().Add(2 * time.Hour))
	jobs := make(chan held)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for h := range jobs {
				l := &kubefarmv1.DHCPLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "strangers-" + strings.ReplaceAll(h.ip, ".", "-")},
					Spec: kubefarmv1.DHCPLeaseSpec{Pool: pool.Name, MAC: h.mac, IP: h.ip, ExpireTime: expire}}
				if err := c.Create(ctx, l); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for _, h := range flood {
		jobs <- h
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		fail.Fatalf("writing the flood's leases: %v", err)
	default:
	}
	t.Logf("wrote %d DHCPLeases in %s", httpMACs, time.Since(start).Round(time.Millisecond))

	// The replica, in a namespace of its own.
	netns := netnstest.New(t, "kfflood")
	apiURL, err := url.Parse(env.Config.Host)
	if err != nil {
		fail.Fatal(err)
	}
	netnstest.Forward(t, netnstest.Listen(t, netns, apiAddr), apiURL.Host)
	pxe := netnstest.StartPXE(t, "flood", netns, binary,
		"--kubeconfig", netnstest.APIKubeconfig(t, env, "kubefarm-pxe", apiAddr),
		"--server-ip", "127.0.0.1",
		"--interface", "lo",
		"--http-addr", httpAddr,
		"--metrics-addr", metricsAddr,
		"--tftp-addr", "",
		"--cache-dir", t.TempDir(),
		"--verify-images=false",
		"--discovery",
		fmt.Sprintf("--discovery-max-machines=%d", maxMachines),
		// The cap, not the rate of new objects, is what must hold the
		// count here (the rate is tested in pxe/server): a rate that never
		// binds, so that the DHCP flood's first 50 are all recorded.
		"--discovery-rate=10000", "--discovery-burst=10000",
	)
	// Ready once the cache, the 10,000 leases included, has synced.
	pxe.WaitHTTP(ctx, t, netnstest.HTTPClient(netns), 3*time.Minute, "http://"+metricsAddr+"/healthz")
	pid := pxe.Cmd.Process.Pid
	rssReady, _ := procstat.RSS(pid)
	t.Logf("ready with %d leases cached: resident %.1f MiB", httpMACs, float64(rssReady)/(1<<20))

	codes := map[int]int{}
	var mu sync.Mutex
	tally := func(code int) {
		mu.Lock()
		codes[code]++
		mu.Unlock()
	}

	// The DHCP flood: leases from the replica, then one report each.
	start = time.Now()
	for i := 0; i < dhcpMACs; i++ {
		mac := randomMAC(t)
		ip, err := dora(netns, mac)
		if err != nil {
			fail.Fatal(err)
		}
		code, err := post(ctx, netns, ip.String(), reportBody(mac.String()))
		if err != nil {
			fail.Fatal(err)
		}
		tally(code)
	}
	t.Logf("DHCP flood: %d MACs leased and reported in %s: %v", dhcpMACs, time.Since(start).Round(time.Millisecond), codes)
	if codes[http.StatusOK] != maxMachines || codes[http.StatusTooManyRequests] != dhcpMACs-maxMachines {
		fail.Errorf("DHCP flood answers %v, want %d recorded (200) and %d refused (429)", codes, maxMachines, dhcpMACs-maxMachines)
	}

	// The HTTP flood: 10,000 MACs, each from its own leased address.
	start = time.Now()
	work := make(chan held)
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for h := range work {
				code, err := post(ctx, netns, h.ip, reportBody(h.mac))
				if err != nil {
					code = 0
				}
				tally(code)
			}
		}()
	}
	for _, h := range flood {
		work <- h
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)
	t.Logf("HTTP flood: %d reports in %s (%.0f/s); all answers %v", httpMACs, elapsed.Round(time.Millisecond), float64(httpMACs)/elapsed.Seconds(), codes)

	total := dhcpMACs + httpMACs
	if codes[http.StatusOK] != maxMachines || codes[http.StatusTooManyRequests] != total-maxMachines {
		fail.Errorf("answers %v: want %d recorded (200) and every other of %d refused (429)", codes, maxMachines, total)
	}
	var list kubefarmv1.DiscoveredMachineList
	if err := c.List(ctx, &list); err != nil {
		fail.Fatal(err)
	}
	if len(list.Items) != maxMachines {
		fail.Errorf("%d DiscoveredMachines after the floods, want the cap, %d", len(list.Items), maxMachines)
	}
	_, page := get(netns, "http://"+metricsAddr+"/metrics")
	r := func(result string) float64 {
		return metric(page, `kubefarm_pxe_discovery_reports_total{result="`+result+`"}`)
	}
	refused := r("refused_cap") + r("refused_rate") + r("refused_source_rate")
	t.Logf("replica's counts: created %v, refused_cap %v, refused_rate %v, refused_source_rate %v, forbidden %v, invalid %v, failed %v",
		r("created"), r("refused_cap"), r("refused_rate"), r("refused_source_rate"), r("forbidden"), r("invalid"), r("failed"))
	if r("created") != maxMachines || int(refused) != codes[http.StatusTooManyRequests] || r("refused_cap") < dhcpMACs-maxMachines {
		fail.Errorf("replica counted %v created and %v refused, the client %d and %d", r("created"), refused, codes[http.StatusOK], codes[http.StatusTooManyRequests])
	}
	if g := metric(page, "kubefarm_pxe_discovery_machines"); g != maxMachines {
		fail.Errorf("kubefarm_pxe_discovery_machines %v, want %d", g, maxMachines)
	}
	goroutines := metric(page, "go_goroutines")
	rss, peak := procstat.RSS(pid)
	t.Logf("after the floods: resident %.1f MiB, peak %.1f MiB (target %d MiB); %v goroutines (target %d)",
		float64(rss)/(1<<20), float64(peak)/(1<<20), residentTarget>>20, goroutines, goroutineTarget)
	if rss == 0 || rss > residentTarget || peak > residentTarget {
		fail.Errorf("resident %d, peak %d bytes; target %d", rss, peak, residentTarget)
	}
	if goroutines < 0 || goroutines > goroutineTarget {
		fail.Errorf("%v goroutines after the floods, target %d", goroutines, goroutineTarget)
	}
}

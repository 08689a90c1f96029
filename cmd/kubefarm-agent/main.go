// kubefarm-agent runs on every netbooted node, as kubefarm-agent.service
// (ARCHITECTURE.md, boot steps 3 to 5): it fetches the machine's node
// configuration from the kubefarm-pxe replica that served this boot, writes
// the kubelet's and flannel's files, starts them, waits for flanneld's
// subnet lease, checks the CNI chain and reports the boot with its verdict.
//
// Before anything else the agent loads the pod guard (package podguard: the
// node drops what its pods send to kubefarm-pxe), and it authenticates
// every request to kubefarm-pxe with this boot's secret (package
// bootsecret), which the initrd left in --boot-secret, readable by root
// alone: nothing a pod can read or send is enough to talk to kubefarm-pxe
// as this node (docs/security.md).
//
// kubelet is started with `systemctl start`, not by unit ordering:
// kubelet.service and flanneld.service carry ConditionPathExists on the
// files this agent writes, so at boot systemd skips them, and nothing later
// would re-evaluate the condition. Starting them explicitly once the files
// are in place is the one ordering that cannot race.
//
// The join token is fetched once per boot (kubefarm-pxe's window closes on
// use), so what was written is remembered in --state-dir (a tmpfs, gone at
// reboot) by boot ID: a restarted agent goes on from the start of kubelet
// instead of asking again. What else of the configuration the agent needs
// later (the pool's rebootAfterLogin) is kept there too.
//
// After a successful report the agent stays running until stopped, so that
// the unit's Restart=always does not run it again, and sends heartbeats to
// kubefarm-pxe's /heartbeat every --heartbeat-interval (±20%, so that a
// rack does not beat in step). A failed heartbeat is logged, and the next
// one tries again. The answer says whether the rollout wants this boot
// replaced (its Rebooting phase for this boot ID): then the agent calls
// `systemctl reboot --force`, once, and the machine netboots the image it
// is now served. If that fails, kubefarm-manager power-cycles the machine.
//
// --force skips the orderly stop of the services, not the killing of the
// processes or the unmounting: the rollout has drained the node, and the
// node is diskless, so an orderly stop protects nothing, while on a slow
// machine it waits minutes for stop jobs (the join e2e's TCG machines spent
// more time shutting down than booting).
//
// A heartbeat also carries the node's drift signal, from the first one it
// is raised on until the reboot (kubefarm-pxe makes it the Machine's
// RebootRequired condition, and the rollout controller reboots the machine
// into a pristine boot of its image):
//
//   - RebootRequiredFile: --reboot-required-file (/run/reboot-required,
//     Debian's flag that an upgraded package needs a reboot) exists; the
//     message names the packages of its .pkgs file.
//   - InteractiveLogin: systemd-logind has a user session (CLASS=user, or
//     the user-early and user-light classes of newer systemd) in
//     --sessions-dir, and the pool's rollout.rebootAfterLogin (from the
//     node configuration; unset: never) has passed since the agent first
//     saw one. That first time is kept in --state-dir, so a restarted agent
//     counts from it too.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubefarm/kubefarm/agent/cnicheck"
	"github.com/kubefarm/kubefarm/agent/noderegister"
	"github.com/kubefarm/kubefarm/agent/podguard"
	"github.com/kubefarm/kubefarm/agent/pxeclient"
	"github.com/kubefarm/kubefarm/agent/render"
	"github.com/kubefarm/kubefarm/pxe/bootpaths"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
	"github.com/kubefarm/kubefarm/pxe/bootsecret"
	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

// Options are the agent's flags. Paths named "in the root" are joined to
// Root; the others are read as given.
type Options struct {
	Root           string        // the node's root file system ("/")
	Cmdline        string        // the kernel command line
	BootIDFile     string        // the kernel's boot ID
	BootIfaceFile  string        // the initrd's record of the boot interface
	BootSecretFile string        // the initrd's copy of this boot's secret (root only)
	SysClassNet    string        // where interfaces' MACs are
	CNIRecord      string        // in the root: what the image records of its CNI chain
	StateDir       string        // in the root: what this boot already did
	FlannelSubnet  string        // in the root: flanneld's lease, written once it runs
	FetchTimeout   time.Duration // bounds fetching the configuration, retries included
	NetworkTimeout time.Duration // bounds the wait for FlannelSubnet
	ReportTimeout  time.Duration // bounds the report, retries included

	// KubeletClientCert is, in the root, the kubelet's client certificate
	// (and key) once its CSR is approved: with it the agent creates the
	// kubelet's Node (agent/noderegister). Empty: the kubelet does.
	KubeletClientCert string
	RegisterTimeout   time.Duration // bounds the wait for that certificate

	HeartbeatInterval  time.Duration // between heartbeats, ±20%; 0: none
	RebootRequiredFile string        // in the root: Debian's flag that a reboot is needed
	SessionsDir        string        // in the root: systemd-logind's session files
}

func defaultOptions() Options {
	return Options{
		Root: "/", Cmdline: "/proc/cmdline", BootIDFile: "/proc/sys/kernel/random/boot_id",
		BootIfaceFile: "/run/kubefarm/bootif", BootSecretFile: bootsecret.File, SysClassNet: "/sys/class/net",
		CNIRecord: "/usr/share/kubefarm/cni.json", StateDir: "/run/kubefarm-agent",
		FlannelSubnet: "/run/flannel/subnet.env",
		FetchTimeout:  15 * time.Minute, NetworkTimeout: 5 * time.Minute, ReportTimeout: 5 * time.Minute,
		HeartbeatInterval: 15 * time.Second, RebootRequiredFile: "/run/reboot-required", SessionsDir: "/run/systemd/sessions",
		KubeletClientCert: "/var/lib/kubelet/pki/kubelet-client-current.pem", RegisterTimeout: 5 * time.Minute,
	}
}

// Deps are the agent's effects on the running system, replaced in tests.
type Deps struct {
	// StartUnits starts systemd units (systemctl start).
	StartUnits func(ctx context.Context, units ...string) error
	// SetHostname sets the kernel's host name.
	SetHostname func(name string) error
	// Guard loads the pod guard's nftables script (package podguard):
	// nft -f -. Required: a node whose pods could reach kubefarm-pxe does
	// not join.
	Guard func(ctx context.Context, rules string) error
	// HTTP talks to kubefarm-pxe; nil is the default client.
	HTTP *http.Client
	// Poll is the interval of the wait for flanneld (default 1 s).
	Poll time.Duration
	// Reboot reboots the node (systemctl reboot); nil: the heartbeat
	// loop only logs that it was asked to.
	Reboot func(ctx context.Context) error
	// Now is the clock of the login signal (default time.Now).
	Now func() time.Time
	// After is the wait between heartbeats (default time.After).
	After func(time.Duration) <-chan time.Time
}

// systemctlStart queues the units' start jobs and returns: flanneld's job
// lasts until the kubelet has its client certificate (its ExecStartPre
// waits for kubelet.conf), and the agent's own bounded wait for flanneld's
// lease is what tells a network that never comes. A unit that does not
// exist is still an error here.
func systemctlStart(ctx context.Context, units ...string) error {
	out, err := exec.CommandContext(ctx, "systemctl", append([]string{"start", "--no-block"}, units...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("systemctl start %s: %v: %s", strings.Join(units, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func main() {
	o := defaultOptions()
	flag.StringVar(&o.Root, "root", o.Root, "the node's root file system; the paths marked 'in the root' are under it")
	flag.StringVar(&o.Cmdline, "cmdline", o.Cmdline, "the kernel command line (kubefarm.server=, kubefarm.image=, BOOTIF=)")
	flag.StringVar(&o.BootIDFile, "boot-id", o.BootIDFile, "the kernel's boot ID")
	flag.StringVar(&o.BootIfaceFile, "bootif", o.BootIfaceFile, "the initrd's record of the boot interface's name")
	flag.StringVar(&o.BootSecretFile, "boot-secret", o.BootSecretFile, "the initrd's copy of this boot's secret, which authenticates the agent to kubefarm-pxe (root only)")
	flag.StringVar(&o.SysClassNet, "sys-class-net", o.SysClassNet, "sysfs' network interfaces (for the boot interface's MAC)")
	flag.StringVar(&o.CNIRecord, "cni-record", o.CNIRecord, "in the root: the image's record of its CNI chain (JSON with the manifest's cni member)")
	flag.StringVar(&o.StateDir, "state-dir", o.StateDir, "in the root: what this boot already did (a tmpfs)")
	flag.StringVar(&o.FlannelSubnet, "flannel-subnet", o.FlannelSubnet, "in the root: the file flanneld writes once it has its lease")
	flag.DurationVar(&o.FetchTimeout, "fetch-timeout", o.FetchTimeout, "bound on fetching the node configuration, retries included")
	flag.DurationVar(&o.NetworkTimeout, "network-timeout", o.NetworkTimeout, "bound on the wait for flanneld's lease")
	flag.DurationVar(&o.ReportTimeout, "report-timeout", o.ReportTimeout, "bound on the report, retries included")
	flag.DurationVar(&o.HeartbeatInterval, "heartbeat-interval", o.HeartbeatInterval, "between heartbeats to kubefarm-pxe after the report, ±20% (0: none)")
	flag.StringVar(&o.RebootRequiredFile, "reboot-required-file", o.RebootRequiredFile, "in the root: the file whose existence asks for a reboot (Debian's convention)")
	flag.StringVar(&o.SessionsDir, "sessions-dir", o.SessionsDir, "in the root: systemd-logind's session files, for the interactive login signal")
	flag.Parse()

	log := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	deps := Deps{StartUnits: systemctlStart, SetHostname: func(n string) error { return syscall.Sethostname([]byte(n)) },
		Guard: nftLoad, Reboot: systemctlReboot}
	hb, err := run(ctx, o, deps, log)
	if err != nil {
		log.Error(err, "kubefarm-agent failed")
		os.Exit(1)
	}
	hb.loop(ctx)
	<-ctx.Done()
}

// nftLoad loads an nftables script in one transaction.
func nftLoad(ctx context.Context, rules string) error {
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft -f -: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// guardPods loads the pod guard for kubefarm-pxe at server (package
// podguard): its address from the URL, a host name resolved here.
func guardPods(ctx context.Context, d Deps, server bootpaths.Base) error {
	if d.Guard == nil {
		return errors.New("no way to load the pod guard's rules")
	}
	u, err := url.Parse(server.String())
	if err != nil {
		return fmt.Errorf("kubefarm.server %q: %w", server, err)
	}
	port := 80
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil {
			return fmt.Errorf("kubefarm.server %q: port: %w", server, err)
		}
	}
	addrs := []netip.Addr{}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		addrs = append(addrs, a)
	} else {
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", u.Hostname())
		if err != nil {
			return fmt.Errorf("resolving kubefarm.server's host %q for the pod guard: %w", u.Hostname(), err)
		}
		addrs = ips
	}
	rules, err := podguard.Rules(addrs, port)
	if err != nil {
		return err
	}
	return d.Guard(ctx, rules)
}

// systemctlReboot asks systemd to reboot without the orderly stop of the
// services (see the package comment); systemd then kills this agent with
// the rest.
func systemctlReboot(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "systemctl", "reboot", "--force").CombinedOutput()
	if err != nil {
		return fmt.Errorf("systemctl reboot --force: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// run does one boot's work up to the report and returns the heartbeats
// that follow it; see the package comment.
func run(ctx context.Context, o Options, d Deps, log logr.Logger) (*heartbeats, error) {
	d = d.withDefaults()
	b, err := readBoot(o)
	if err != nil {
		return nil, err
	}
	log = log.WithValues("server", b.params.Server.String(), "mac", b.mac, "bootID", b.bootID)
	// First of all, before kubelet can start a pod: pods must not reach
	// kubefarm-pxe in the node's name.
	if err := guardPods(ctx, d, b.params.Server); err != nil {
		return nil, fmt.Errorf("guarding kubefarm-pxe from this node's pods: %w", err)
	}
	secret, err := readBootSecret(o.BootSecretFile)
	if err != nil {
		return nil, err
	}
	pxe := &pxeclient.Client{Base: b.params.Server, Secret: secret, HTTP: d.HTTP, Log: log}

	// 1. Configuration and files, once per boot.
	kept, reg, err := configure(ctx, o, d, pxe, b, log)
	if err != nil {
		return nil, err
	}

	// 2. kubelet and flanneld; the kubelet's Node as soon as it has a
	// credential (on a fresh configuration only: a restarted agent's
	// kubelet registered long ago).
	if err := d.StartUnits(ctx, "kubelet.service", "flanneld.service"); err != nil {
		return nil, err
	}
	if reg != nil {
		go reg.create(ctx, o, log)
	}

	// 3. The network: flanneld's lease, then the chain.
	verdict := waitNetwork(ctx, filepath.Join(o.Root, o.FlannelSubnet), o.NetworkTimeout, d.Poll)
	if verdict.OK {
		verdict = checkChain(o)
	}
	log.Info("CNI chain checked", "verified", verdict.OK, "reason", verdict.Reason)

	// 4. The report.
	if err := report(ctx, o, pxe, b, verdict); err != nil {
		return nil, err
	}
	log.Info("boot reported")
	return newHeartbeats(o, d, pxe, b.mac, b.bootID, kept.RebootAfterLogin, log), nil
}

// withDefaults fills in what a test's Deps leave out.
func (d Deps) withDefaults() Deps {
	if d.Poll <= 0 {
		d.Poll = time.Second
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.After == nil {
		d.After = time.After
	}
	return d
}

// boot is what the kernel and the initrd say of this boot.
type boot struct {
	params bootproto.Params
	bootID string
	iface  string // the boot interface
	mac    string // its MAC, the machine's name to kubefarm-pxe
}

// readBoot reads the kernel command line, the boot ID and the boot
// interface.
func readBoot(o Options) (boot, error) {
	cmdline, err := os.ReadFile(o.Cmdline)
	if err != nil {
		return boot{}, err
	}
	params, err := bootproto.Parse(string(cmdline))
	if err != nil {
		return boot{}, err
	}
	b, err := os.ReadFile(o.BootIDFile)
	if err != nil {
		return boot{}, err
	}
	bootID, err := bootproto.ParseBootID(string(b))
	if err != nil {
		return boot{}, err
	}
	iface, mac, err := bootInterface(o, params)
	if err != nil {
		return boot{}, err
	}
	return boot{params: params, bootID: bootID, iface: iface, mac: mac}, nil
}

// registration is the Node the kubelet registers, and where: known when
// this run fetched the configuration and the agent creates the Node.
type registration struct {
	node      *corev1.Node
	apiServer string
}

// create creates the kubelet's Node once its client certificate is
// there; failing that, the kubelet registers it itself.
func (r *registration) create(ctx context.Context, o Options, log logr.Logger) {
	in := func(p string) string { return filepath.Join(o.Root, p) }
	out, err := noderegister.Create(ctx, r.apiServer, in(render.CACert), in(o.KubeletClientCert), r.node, 200*time.Millisecond, o.RegisterTimeout)
	if err != nil {
		log.Info("the kubelet registers its Node itself", "node", r.node.Name, "reason", err.Error())
		return
	}
	log.Info("the kubelet's Node", "node", r.node.Name, "outcome", string(out))
}

// configure writes this boot's files from the configuration kubefarm-pxe
// serves, once per boot: a restarted agent finds the marker of this boot
// and keeps what the first run wrote. The registration is nil then.
func configure(ctx context.Context, o Options, d Deps, pxe *pxeclient.Client, b boot, log logr.Logger) (settings, *registration, error) {
	stateDir := filepath.Join(o.Root, o.StateDir)
	marker := filepath.Join(stateDir, "configured")
	if done, _ := os.ReadFile(marker); strings.TrimSpace(string(done)) == b.bootID {
		log.Info("files of this boot already written; not fetching the configuration again")
		var kept settings
		if err := readState(stateDir, settingsFile, b.bootID, &kept); err != nil {
			log.Error(err, "what this boot's configuration said beyond the files is lost; no reboot after a login")
		}
		return kept, nil, nil
	}
	fctx, cancel := context.WithTimeout(ctx, o.FetchTimeout)
	nc, err := pxe.FetchConfig(fctx, b.mac)
	cancel()
	if err != nil {
		return settings{}, nil, fmt.Errorf("fetching the node configuration: %w", err)
	}
	// Never the whole NodeConfig: it holds the join token.
	log.Info("fetched the node configuration", "machine", nc.Machine, "cluster", nc.Cluster, "hostname", nc.Hostname, "apiServer", nc.APIServer)
	if nc.ImageDigest != "" && nc.ImageDigest != b.params.Image {
		log.Info("kubefarm-pxe serves another image than this boot's", "served", nc.ImageDigest, "booted", b.params.Image)
	}
	reg, err := writeConfig(o, d, nc, b.iface, log)
	if err != nil {
		return settings{}, nil, err
	}
	// Before the marker: a marker of this boot means both are there.
	kept := settings{BootID: b.bootID, RebootAfterLogin: nc.RebootAfterLogin}
	if err := writeState(stateDir, settingsFile, kept); err != nil {
		return settings{}, nil, err
	}
	if err := os.WriteFile(marker, []byte(b.bootID+"\n"), 0o600); err != nil {
		return settings{}, nil, err
	}
	return kept, reg, nil
}

// writeConfig renders nc into the root's files and sets the host name; the
// registration is nil unless the agent creates the kubelet's Node.
func writeConfig(o Options, d Deps, nc nodeconfig.NodeConfig, iface string, log logr.Logger) (*registration, error) {
	rin := render.Input{Config: nc, BootIface: iface}
	if nc.RootPasswordHash != "" {
		var err error
		if rin.Shadow, err = os.ReadFile(filepath.Join(o.Root, render.Shadow)); err != nil {
			return nil, err
		}
	}
	res, err := render.Render(rin)
	if err != nil {
		return nil, err
	}
	var reg *registration
	if o.KubeletClientCert != "" {
		node, err := render.Node(nc)
		if err != nil {
			return nil, err
		}
		reg = &registration{node: node, apiServer: nc.APIServer}
	}
	if len(res.DroppedLabels) > 0 {
		log.Info("labels kubelet may not set on its own Node left to kubefarm-manager", "labels", res.DroppedLabels)
	}
	if err := writeFiles(o.Root, res.Files); err != nil {
		return nil, err
	}
	if err := d.SetHostname(nc.Hostname); err != nil {
		return nil, fmt.Errorf("setting the host name %q: %w", nc.Hostname, err)
	}
	return reg, nil
}

// report tells kubefarm-pxe what booted and whether the network works.
func report(ctx context.Context, o Options, pxe *pxeclient.Client, b boot, verdict cnicheck.Verdict) error {
	rep := bootproto.BootReport{MAC: b.mac, BootID: b.bootID, ImageDigest: b.params.Image,
		Network: &bootproto.NetworkVerdict{Verified: verdict.OK, Reason: clip(verdict.Reason, bootproto.MaxNetworkReason)}}
	rctx, cancel := context.WithTimeout(ctx, o.ReportTimeout)
	defer cancel()
	if err := pxe.Report(rctx, rep); err != nil {
		return fmt.Errorf("reporting the boot: %w", err)
	}
	return nil
}

// readBootSecret reads this boot's secret (package bootsecret), which the
// initrd left in a root-only file. It refuses a file others may read: the
// secret is what tells this node from its pods.
func readBootSecret(path string) (bootsecret.Secret, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("this boot's secret: %w (the initrd moves it there from the archive kubefarm-pxe served beside the node image's initrd)", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("this boot's secret %s has mode %v: others may read it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("this boot's secret: %w", err)
	}
	s, err := bootsecret.Parse(string(b))
	if err != nil {
		return "", fmt.Errorf("this boot's secret %s: %w", path, err)
	}
	return s, nil
}

// bootInterface names the interface the machine booted on and its MAC: the
// one the initrd got its lease on (so the address kubefarm-pxe checks
// /config against), whose MAC is BOOTIF's when iPXE passed it.
func bootInterface(o Options, p bootproto.Params) (iface, mac string, err error) {
	b, err := os.ReadFile(o.BootIfaceFile)
	if err != nil {
		return "", "", fmt.Errorf("the boot interface: %w", err)
	}
	if iface, err = bootproto.ParseBootIface(string(b)); err != nil {
		return "", "", err
	}
	if p.BootIF != "" {
		return iface, p.BootIF, nil
	}
	addr, err := os.ReadFile(filepath.Join(o.SysClassNet, iface, "address"))
	if err != nil {
		return "", "", fmt.Errorf("the MAC of boot interface %s: %w", iface, err)
	}
	mac, err = bootproto.NormalizeMAC(strings.TrimSpace(string(addr)))
	if err != nil {
		return "", "", fmt.Errorf("the MAC of boot interface %s: %w", iface, err)
	}
	return iface, mac, nil
}

// waitNetwork waits for flanneld's subnet file. A failed wait is a verdict
// with its reason; success is OK without one (the chain check follows).
func waitNetwork(ctx context.Context, file string, timeout, poll time.Duration) cnicheck.Verdict {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		if fi, err := os.Stat(file); err == nil && fi.Size() > 0 {
			return cnicheck.Verdict{OK: true}
		}
		select {
		case <-ctx.Done():
			return cnicheck.Verdict{Reason: fmt.Sprintf("flanneld wrote no %s within %s", strings.TrimPrefix(file, "/"), timeout)}
		case <-t.C:
		}
	}
}

func checkChain(o Options) cnicheck.Verdict {
	want, err := cnicheck.ReadExpected(filepath.Join(o.Root, o.CNIRecord))
	if err != nil {
		return cnicheck.Verdict{Reason: err.Error()}
	}
	return cnicheck.Check(o.Root, cnicheck.Default, want)
}

// clip cuts s to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && (s[n]&0xc0) == 0x80 {
		n--
	}
	return s[:n]
}

// writeFiles writes files under root: each through a temporary file renamed
// into place, so kubelet never reads half a file, with its mode set
// whatever the umask.
func writeFiles(root string, files []render.File) error {
	for _, f := range files {
		p := filepath.Join(root, f.Path)
		dirMode := os.FileMode(0o755)
		if f.Mode&0o077 == 0 && strings.HasPrefix(f.Path, "/root/") {
			dirMode = 0o700 // /root/.ssh
		}
		if err := os.MkdirAll(filepath.Dir(p), dirMode); err != nil {
			return fmt.Errorf("writing %s: %w", f.Path, err)
		}
		tmp := p + ".kubefarm-agent.tmp"
		_ = os.Remove(tmp)
		if f.Symlink != "" {
			if err := os.Symlink(f.Symlink, tmp); err != nil {
				return fmt.Errorf("writing %s: %w", f.Path, err)
			}
		} else {
			if err := os.WriteFile(tmp, f.Data, f.Mode); err != nil {
				return fmt.Errorf("writing %s: %w", f.Path, err)
			}
			if err := os.Chmod(tmp, f.Mode); err != nil {
				return fmt.Errorf("writing %s: %w", f.Path, err)
			}
		}
		if err := os.Rename(tmp, p); err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("writing %s: %w", f.Path, err)
		}
	}
	return nil
}

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
//
// A discovery boot (kubefarm.mode=discover on the kernel command line: a
// machine no Machine claims, booted by kubefarm-pxe without a boot secret)
// does none of this: no configuration, no files, no units, no Node, no
// pod guard. The agent reports the machine's hardware to /discovery until
// the answer says it is enrolled, then reboots as for a rollout
// (discovery.go, docs/agent.md).
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

	"github.com/kubefarm/kubefarm/agent/facts"
	"github.com/kubefarm/kubefarm/agent/podguard"
	"github.com/kubefarm/kubefarm/agent/pxeclient"
	"github.com/kubefarm/kubefarm/pxe/bootpaths"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
	"github.com/kubefarm/kubefarm/pxe/bootsecret"
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
	NetworkTimeout time.Duration // bounds the wait for the hostNetwork's links, and for FlannelSubnet
	ReportTimeout  time.Duration // bounds the report, retries included

	// KubeletClientCert is, in the root, the kubelet's client certificate
	// (and key) once its CSR is approved: with it the agent creates the
	// kubelet's Node (agent/noderegister). Empty: the kubelet does.
	KubeletClientCert string
	RegisterTimeout   time.Duration // bounds the wait for that certificate

	HeartbeatInterval  time.Duration // between heartbeats, ±20%; 0: none
	RebootRequiredFile string        // in the root: Debian's flag that a reboot is needed
	SessionsDir        string        // in the root: systemd-logind's session files
	Console            string        // the console discovery mode writes to
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
		Console: "/dev/console",
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
	// ApplyNetwork brings the hostNetwork's links up from the files the
	// agent wrote and waits for them (networkctl reload, then
	// systemd-networkd-wait-online); nil: a hostNetwork cannot be applied.
	ApplyNetwork func(ctx context.Context, links []string, timeout time.Duration) error
	// Poll is the interval of the wait for flanneld (default 1 s).
	Poll time.Duration
	// Reboot reboots the node (systemctl reboot); nil: the heartbeat
	// loop only logs that it was asked to.
	Reboot func(ctx context.Context) error
	// Now is the clock of the login signal (default time.Now).
	Now func() time.Time
	// After is the wait between heartbeats and between discovery reports
	// (default time.After).
	After func(time.Duration) <-chan time.Time

	// Discovery mode's (discovery.go):
	// LoadModules loads kernel modules (modprobe -a), for the IPMI
	// device; nil: none are loaded.
	LoadModules func(ctx context.Context, modules ...string) error
	// BMCAddress reads the BMC's address (agent/facts.BMCAddress); nil:
	// none is reported.
	BMCAddress func(ctx context.Context) (string, error)
	// Console writes a line to the machine's console; nil: none.
	Console func(line string)
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
	flag.DurationVar(&o.NetworkTimeout, "network-timeout", o.NetworkTimeout, "bound on the wait for the hostNetwork's links (bonds, VLANs) and, after, for flanneld's lease")
	flag.DurationVar(&o.ReportTimeout, "report-timeout", o.ReportTimeout, "bound on the report, retries included")
	flag.DurationVar(&o.HeartbeatInterval, "heartbeat-interval", o.HeartbeatInterval, "between heartbeats to kubefarm-pxe after the report, ±20% (0: none)")
	flag.StringVar(&o.RebootRequiredFile, "reboot-required-file", o.RebootRequiredFile, "in the root: the file whose existence asks for a reboot (Debian's convention)")
	flag.StringVar(&o.SessionsDir, "sessions-dir", o.SessionsDir, "in the root: systemd-logind's session files, for the interactive login signal")
	flag.StringVar(&o.Console, "console", o.Console, "where discovery mode (kubefarm.mode=discover) writes what an operator at the console should see")
	flag.Parse()

	log := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	deps := Deps{StartUnits: systemctlStart, SetHostname: func(n string) error { return syscall.Sethostname([]byte(n)) },
		Guard: nftLoad, Reboot: systemctlReboot, LoadModules: modprobe, ApplyNetwork: networkdApply,
		BMCAddress: func(ctx context.Context) (string, error) { return facts.BMCAddress(ctx, bmcRequest) },
		Console:    func(line string) { writeConsole(o.Console, line) }}
	hb, err := run(ctx, o, deps, log)
	if err != nil {
		log.Error(err, "kubefarm-agent failed")
		os.Exit(1)
	}
	if hb != nil {
		hb.loop(ctx)
	}
	<-ctx.Done()
}

// nftLoad loads an nftables script in one transaction.
// networkdApply has systemd-networkd read the files the agent wrote and
// waits until each link is up with its addresses.
func networkdApply(ctx context.Context, links []string, timeout time.Duration) error {
	if out, err := exec.CommandContext(ctx, "networkctl", "reload").CombinedOutput(); err != nil {
		return fmt.Errorf("networkctl reload: %v: %s", err, clip(strings.TrimSpace(string(out)), 256))
	}
	args := []string{fmt.Sprintf("--timeout=%d", int(timeout.Seconds()))}
	for _, l := range links {
		args = append(args, "--interface="+l)
	}
	if out, err := exec.CommandContext(ctx, "/lib/systemd/systemd-networkd-wait-online", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("systemd-networkd-wait-online %s: %v: %s", strings.Join(args, " "), err, clip(strings.TrimSpace(string(out)), 256))
	}
	return nil
}

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
// that follow it; see the package comment. A discovery boot
// (kubefarm.mode=discover) runs discovery mode instead, until the machine
// is enrolled and rebooting: no heartbeats follow it.
func run(ctx context.Context, o Options, d Deps, log logr.Logger) (*heartbeats, error) {
	d = d.withDefaults()
	b, err := readBoot(o)
	if err != nil {
		return nil, err
	}
	if b.params.Mode == bootproto.ModeDiscover {
		if err := discover(ctx, o, d, b, log.WithValues("server", b.params.Server.String(), "mac", b.mac)); err != nil && ctx.Err() == nil {
			return nil, err
		}
		return nil, nil
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

	// 1b. The machine's own links, before the kubelet uses them.
	netVerdict := applyNetwork(ctx, o, d, kept.NetworkLinks, log)

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
	verdict := netVerdict
	if verdict.OK {
		verdict = waitNetwork(ctx, filepath.Join(o.Root, o.FlannelSubnet), o.NetworkTimeout, d.Poll)
	}
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

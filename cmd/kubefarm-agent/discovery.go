package main

// Discovery mode (docs/agent.md): the boot of a machine no Machine claims,
// which kubefarm-pxe serves with kubefarm.mode=discover and no boot
// secret. The agent joins nothing: it fetches no configuration (there is
// no credential to fetch it with), writes no kubelet or flannel file,
// starts no unit, registers no Node and loads no pod guard (no pod runs:
// the node image's containerd, image import, kubelet and flanneld units
// skip any boot whose command line names kubefarm.mode). It reads the
// hardware (agent/facts) and posts it to kubefarm-pxe's /discovery, again
// every ReportAfterSeconds of the answer, until the answer says a Machine
// claims the MAC; then it reboots, the way a rollout reboots a node, and
// the next boot is the pool's.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/kubefarm/kubefarm/agent/facts"
	"github.com/kubefarm/kubefarm/agent/pxeclient"
	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
)

// The pace of the discovery reports.
const (
	// discoveryDefault is the interval when an answer names none.
	discoveryDefault = 60 * time.Second
	// discoveryFloor and discoveryCeiling bound every wait, jitter
	// included: a server answering 0 s does not turn a rack of agents into
	// a flood, one answering a day does not strand a machine that was
	// enrolled meanwhile.
	discoveryFloor   = 10 * time.Second
	discoveryCeiling = 10 * time.Minute
	// discoveryBackoff is the first wait after a failed report; it doubles
	// with each failure in a row up to discoveryMaxBackoff. A 429's
	// Retry-After, when longer, wins.
	discoveryBackoff    = 5 * time.Second
	discoveryMaxBackoff = 5 * time.Minute
	// bmcTimeout bounds reading the BMC's address, bmcRequest each of its
	// requests; moduleTimeout bounds loading the IPMI drivers.
	bmcTimeout    = 20 * time.Second
	bmcRequest    = 3 * time.Second
	moduleTimeout = 30 * time.Second
)

// ipmiModules give a host with a BMC its /dev/ipmi0: ipmi_si finds the
// system interface (ACPI or SMBIOS), ipmi_devintf makes the device; udev
// loads the first by itself on most servers, never the second.
var ipmiModules = []string{"ipmi_si", "ipmi_devintf"}

// discoveryWait is how long to wait before the next report: after an
// answer, its ReportAfterSeconds (discoveryDefault when it names none);
// after failures failed reports in a row, discoveryBackoff doubled per
// failure up to discoveryMaxBackoff, or retryAfter when that is longer.
// Then ±20% (r in [0, 1) picks where), within the floor and the ceiling.
func discoveryWait(reportAfterSeconds int32, failures int, retryAfter time.Duration, r float64) time.Duration {
	d := time.Duration(reportAfterSeconds) * time.Second
	if reportAfterSeconds <= 0 {
		d = discoveryDefault
	}
	if failures > 0 {
		d = discoveryBackoff
		for i := 1; i < failures && d < discoveryMaxBackoff; i++ {
			d *= 2
		}
		d = max(min(d, discoveryMaxBackoff), retryAfter)
	}
	d = min(d, discoveryCeiling)
	d += time.Duration((r*0.4 - 0.2) * float64(d))
	return min(max(d, discoveryFloor), discoveryCeiling)
}

// discovery is the discovery mode's loop.
type discovery struct {
	o   Options
	d   Deps
	pxe *pxeclient.Client
	mac string
	log logr.Logger
}

// discover runs discovery mode until the machine is enrolled and rebooting
// (nil) or ctx ends.
func discover(ctx context.Context, o Options, d Deps, b boot, log logr.Logger) error {
	log = log.WithValues("mode", bootproto.ModeDiscover)
	dm := &discovery{o: o, d: d, mac: b.mac, log: log,
		pxe: &pxeclient.Client{Base: b.params.Server, HTTP: d.HTTP, Log: log}}
	dm.console(fmt.Sprintf("DISCOVERY MODE: no Machine claims this machine (MAC %s); it joins nothing and reports its hardware to %s%s "+
		"until it is enrolled into a pool (kubectl kubefarm enroll %s --pool <pool> --name <name>), then reboots into the pool's image",
		b.mac, b.params.Server, bootproto.DiscoveryPath, kubefarmv1.DiscoveredMachineName(b.mac)))
	log.Info("discovery mode: reporting the hardware until enrolled")
	if d.LoadModules != nil && !facts.HasIPMIDevice(o.Root) {
		mctx, cancel := context.WithTimeout(ctx, moduleTimeout)
		if err := d.LoadModules(mctx, ipmiModules...); err != nil {
			log.Info("no IPMI drivers loaded: the BMC's address stays unknown unless the host has its device", "reason", err.Error())
		}
		cancel()
	}
	return dm.loop(ctx)
}

// loop reports, waits and reports again; see discover.
func (dm *discovery) loop(ctx context.Context) error {
	failures := 0
	reported := false
	for {
		rep := bootproto.DiscoveryReport{MAC: dm.mac, Hardware: dm.read(ctx)}
		ans, err := dm.pxe.Discover(ctx, rep)
		var retryAfter time.Duration
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			failures++
			var se *pxeclient.StatusError
			if errors.As(err, &se) {
				retryAfter = se.RetryAfter
			}
			if failures == 1 {
				dm.console(fmt.Sprintf("discovery: the report of MAC %s was not accepted (%s); trying again", dm.mac, consoleError(err)))
			}
			dm.log.Error(err, "discovery report failed", "failures", failures)
		case ans.Enrolled:
			dm.console(fmt.Sprintf("discovery: MAC %s is enrolled; rebooting into its pool's image", dm.mac))
			dm.log.Info("enrolled: rebooting")
			if dm.d.Reboot == nil {
				dm.log.Info("no way to reboot configured")
				return nil
			}
			rerr := dm.d.Reboot(ctx)
			if rerr == nil {
				return nil
			}
			// The next answer says enrolled again, and the next reboot
			// is tried then.
			failures++
			dm.console(fmt.Sprintf("discovery: reboot failed (%s); trying again at the next report", consoleError(rerr)))
			dm.log.Error(rerr, "reboot failed")
		default:
			if !reported || failures > 0 {
				dm.console(fmt.Sprintf("discovery: reported MAC %s: %s", dm.mac, summary(rep.Hardware)))
			}
			dm.log.Info("discovery report accepted", "reportAfterSeconds", ans.ReportAfterSeconds, "hardware", summary(rep.Hardware))
			reported, failures = true, 0
		}
		wait := discoveryWait(ans.ReportAfterSeconds, failures, retryAfter, rand.Float64())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-dm.d.After(wait):
		}
	}
}

// read reads the hardware, and the BMC's address where the host can.
func (dm *discovery) read(ctx context.Context) kubefarmv1.HardwareFacts {
	hw := facts.Read(dm.o.Root)
	if dm.d.BMCAddress != nil {
		bctx, cancel := context.WithTimeout(ctx, bmcTimeout)
		addr, err := dm.d.BMCAddress(bctx)
		cancel()
		if err != nil {
			dm.log.Info("the BMC's address is unknown", "reason", err.Error())
		}
		hw.BMCAddress = facts.UsableBMCAddress(net.ParseIP(addr))
	}
	return hw
}

// summary is one console line of what was reported.
func summary(hw kubefarmv1.HardwareFacts) string {
	parts := []string{}
	if s := strings.TrimSpace(hw.System.Vendor + " " + hw.System.Product); s != "" {
		parts = append(parts, s)
	}
	if hw.System.Serial != "" {
		parts = append(parts, "serial "+hw.System.Serial)
	}
	parts = append(parts, fmt.Sprintf("%d CPUs", hw.CPU.Count), fmt.Sprintf("%d MiB", hw.MemoryMiB),
		fmt.Sprintf("%d disks", len(hw.Disks)), fmt.Sprintf("%d NICs", len(hw.NICs)))
	if hw.BMCAddress != "" {
		parts = append(parts, "BMC "+hw.BMCAddress)
	}
	return strings.Join(parts, ", ")
}

// consoleError is an error as one bounded console line.
func consoleError(err error) string {
	return clip(sanitize(err.Error()), 200)
}

// console writes a line for whoever watches the machine's console (the
// initrd's lines start the same way); the journal has the details.
func (dm *discovery) console(msg string) {
	if dm.d.Console != nil {
		dm.d.Console("kubefarm: " + msg)
	}
}

// writeConsole writes a line to /dev/console.
func writeConsole(path, line string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|syscall.O_NOCTTY, 0)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(line + "\r\n")
}

// modprobe loads kernel modules (modprobe -a); one that does not load
// (no such hardware) is an error, which the caller only logs.
func modprobe(ctx context.Context, modules ...string) error {
	out, err := exec.CommandContext(ctx, "modprobe", append([]string{"-a"}, modules...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("modprobe -a %s: %v: %s", strings.Join(modules, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

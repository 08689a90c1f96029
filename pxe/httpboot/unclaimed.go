package httpboot

// The boot script of a MAC no Machine claims: a machine that got its
// address from a pool's catch-all range (pxe/dynamic). What it boots
// depends on the pool's spec.network.dynamicRange.unknownMachines and on
// kubefarm-pxe's --discovery (docs/discovery.md):
//
//   - Join: the NodePool controller makes a Machine for the MAC. Until the
//     inventory has it, the machine gets WaitScript: sleep, ask DHCP again
//     (so that the DHCP answer to its iPXE, now a Machine's, arms the boot
//     window its secret needs) and chain the same script URL. Bounded: the
//     URL counts the rounds (?wait=N) and after MaxWaitRounds the answer is
//     404, so iPXE gives up and the firmware's own boot order takes over.
//   - Hold with --discovery: DiscoveryScript, the pool's image with
//     kubefarm.mode=discover and no boot secret, no join token, nothing to
//     join with: the agent only reports the hardware (POST /discovery).
//   - Anything else: 404, as for any MAC kubefarm-pxe does not know.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/machineconfig"
	"github.com/kubefarm/kubefarm/pxe/bootpaths"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
	"github.com/kubefarm/kubefarm/pxe/dynamic"
)

// UnclaimedBoot is what a MAC no Machine claims boots.
type UnclaimedBoot int

const (
	// UnclaimedNone: nothing (404).
	UnclaimedNone UnclaimedBoot = iota
	// UnclaimedWait: WaitScript, until the Machine of a Join pool exists.
	UnclaimedWait
	// UnclaimedDiscover: DiscoveryScript, the pool's image in discovery
	// mode.
	UnclaimedDiscover
)

func (u UnclaimedBoot) String() string {
	switch u {
	case UnclaimedWait:
		return "wait"
	case UnclaimedDiscover:
		return "discover"
	}
	return "none"
}

// MaxWaitRounds bounds WaitScript's rounds: WaitSeconds apart, about five
// minutes for the NodePool controller to make the Machine.
const MaxWaitRounds = 60

// WaitSeconds is how long WaitScript sleeps before it asks again.
const WaitSeconds = 5

// WaitParam is the query parameter that counts WaitScript's rounds.
const WaitParam = "wait"

// DecideUnclaimed decides the boot of a MAC no Machine claims. held and
// ok are its current lease from a catch-all range; pool is that lease's
// NodePool (nil when the cache has none); discovery is --discovery; round
// is the WaitParam of the request (0 on the first fetch).
func DecideUnclaimed(held dynamic.Held, ok bool, pool *kubefarmv1.NodePool, discovery bool, round int) UnclaimedBoot {
	if !ok || pool == nil || pool.DeletionTimestamp != nil || pool.Spec.Network.DynamicRange == nil ||
		pool.Namespace != held.Namespace || pool.Name != held.Pool {
		return UnclaimedNone
	}
	switch pool.Spec.Network.DynamicRange.UnknownMachines {
	case kubefarmv1.UnknownJoin:
		if round < 0 || round >= MaxWaitRounds {
			return UnclaimedNone
		}
		return UnclaimedWait
	case kubefarmv1.UnknownHold, "":
		// "" is Hold: the API's default, for an object written before the
		// field existed.
		if discovery {
			return UnclaimedDiscover
		}
	}
	return UnclaimedNone
}

// WaitRound parses the WaitParam of a script request: 0 when absent, -1
// when it is not a small count (DecideUnclaimed then answers nothing).
func WaitRound(v string) int {
	if v == "" {
		return 0
	}
	if len(v) > 3 {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// WaitScript is the script of a Join pool's machine whose Machine does not
// exist yet: it prints why it waits, sleeps WaitSeconds, asks DHCP again
// and chains its own script URL with the next round. mac is the lower-case
// colon form (the URL is the one the DHCP answer names); pool is the
// pool's namespace/name, printed on the console.
func WaitScript(baseURL, mac, pool string, round int) (string, error) {
	urls, err := bootpaths.ParseBase(baseURL)
	if err != nil {
		return "", err
	}
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 {
		return "", fmt.Errorf("MAC %q is not a 6-byte MAC address", mac)
	}
	if !scriptSafe(pool) {
		return "", fmt.Errorf("pool %q is not a namespace/name", pool)
	}
	var b strings.Builder
	b.WriteString("#!ipxe\n")
	fmt.Fprintf(&b, "echo kubefarm: waiting for the Machine of %s in pool %s (unknownMachines: Join), round %d of %d\n", mac, pool, round+1, MaxWaitRounds)
	fmt.Fprintf(&b, "sleep %d\n", WaitSeconds)
	// A new DHCP exchange: once the Machine exists, its answer arms the
	// boot window that the boot's secret is issued in.
	b.WriteString("dhcp\n")
	fmt.Fprintf(&b, "chain --replace --autofree %s?%s=%d\n", urls.Script(hw), WaitParam, round+1)
	return b.String(), nil
}

// DiscoveryScript boots pool's image img in discovery mode: the kernel,
// initrd and root filesystem of a normal boot, the pool's kernel arguments
// (its own and its `all` tag's), kubefarm.mode=discover, and no boot
// secret: the script names no /secret, so nothing a discovery boot holds
// can join a cluster or authenticate as a Machine.
func DiscoveryScript(img *kubefarmv1.BootImage, pool *kubefarmv1.NodePool, baseURL string) (string, error) {
	if img == nil || pool == nil {
		return "", errors.New("image and pool are required")
	}
	urls, err := bootpaths.ParseBase(baseURL)
	if err != nil {
		return "", err
	}
	if img.Name != pool.Spec.BootImage {
		return "", fmt.Errorf("image %q is not pool %s/%s's image %q", img.Name, pool.Namespace, pool.Name, pool.Spec.BootImage)
	}
	k, i, r := img.Spec.Kernel.Digest, img.Spec.Initrd.Digest, img.Spec.Rootfs.Digest
	for _, d := range []string{k, i, r} {
		if !bootproto.ValidDigest(d) {
			return "", fmt.Errorf("image %q: invalid digest %q", img.Name, d)
		}
	}
	resolved, err := machineconfig.Resolve(pool, nil)
	if err != nil {
		return "", err
	}
	args := append([]string(nil), resolved.KernelArgs...)
	for _, a := range args {
		if err := ValidateKernelArg(a); err != nil {
			return "", err
		}
	}
	args = append(args,
		"initrd="+initrdName,
		bootproto.KeyImage+"="+r,
		bootproto.KeyRootfs+"="+urls.Artifact(r),
		bootproto.KeyServer+"="+urls.String(),
		bootIfArg,
		bootproto.KeyMode+"="+bootproto.ModeDiscover,
	)
	cmdline := strings.Join(args, " ")
	if len(cmdline) > MaxCmdline {
		return "", fmt.Errorf("kernel command line is %d bytes, over %d", len(cmdline), MaxCmdline)
	}
	var b strings.Builder
	b.WriteString("#!ipxe\n")
	b.WriteString(archCheck(img))
	b.WriteString("kernel " + urls.Artifact(k) + " " + cmdline + "\n")
	b.WriteString("initrd --name " + initrdName + " " + urls.Artifact(i) + "\n")
	b.WriteString("boot\n")
	b.WriteString(archRefusal(img))
	return b.String(), nil
}

// scriptSafe: s is a namespace/name (lower-case letters, digits, '-',
// '.', one '/'), which a script line may print as it is.
func scriptSafe(s string) bool {
	if s == "" || len(s) > 317 || strings.Count(s, "/") != 1 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '/') {
			return false
		}
	}
	return true
}

// unclaimed answers the script request of a MAC no Machine claims.
func (h *Handler) unclaimed(w http.ResponseWriter, r *http.Request, mac string) {
	if h.cfg.Leases == nil {
		h.log.V(1).Info("script for unknown MAC", "mac", mac, "peer", r.RemoteAddr)
		http.NotFound(w, r)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	held, ok := h.cfg.Leases.LeaseOfMAC(ctx, mac)
	cancel()
	var pool *kubefarmv1.NodePool
	if ok {
		if p, found := h.machines.Pool(held.Namespace, held.Pool); found {
			pool = p
		}
	}
	round := WaitRound(r.URL.Query().Get(WaitParam))
	log := h.log.WithValues("mac", mac, "peer", r.RemoteAddr, "pool", held.PoolKey())
	switch DecideUnclaimed(held, ok, pool, h.cfg.Discovery != nil, round) {
	case UnclaimedWait:
		script, err := WaitScript(h.cfg.BaseURL, mac, held.PoolKey(), round)
		if err != nil {
			log.Error(err, "building the wait script")
			http.Error(w, "cannot build boot script", http.StatusServiceUnavailable)
			return
		}
		log.V(1).Info("unknown MAC of a Join pool: waiting for its Machine", "round", round)
		writeScript(w, r, script)
	case UnclaimedDiscover:
		img, found := h.machines.BootImage(pool.Spec.BootImage)
		if !found {
			log.Info("pool's boot image not found", "image", pool.Spec.BootImage)
			h.cfg.Discovery.imageMissing(pool, mac, held.IP)
			http.Error(w, "boot image not available", http.StatusServiceUnavailable)
			return
		}
		script, err := DiscoveryScript(img, pool, h.cfg.BaseURL)
		if err != nil {
			log.Error(err, "building the discovery script")
			http.Error(w, "cannot build boot script", http.StatusServiceUnavailable)
			return
		}
		if !h.ensureArtifacts(w, r, img, log) {
			return
		}
		log.Info("serving the discovery boot script", "image", img.Name)
		writeScript(w, r, script)
	default:
		log.V(1).Info("script for unknown MAC")
		http.NotFound(w, r)
	}
}

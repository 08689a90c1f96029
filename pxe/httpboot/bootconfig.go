package httpboot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
	"github.com/kubefarm/kubefarm/internal/machineconfig"
	"github.com/kubefarm/kubefarm/pxe/bootsecret"
)

// NetworkUnavailableTaint keeps pods off a node until the agent has checked
// its CNI chain (ARCHITECTURE.md, boot step 4). The kubelet registers with
// it; the manager lifts it (controllers/machinenode) once the agent's
// report for the boot the node runs has made NetworkVerified True.
var NetworkUnavailableTaint = corev1.Taint{Key: "kubefarm.io/network-unavailable", Effect: corev1.TaintEffectNoSchedule}

// NodeConfig is what kubefarm-agent fetches at /config/<mac> once per boot.
type NodeConfig struct {
	Machine     string                 `json:"machine"`
	Cluster     string                 `json:"cluster"`
	Hostname    string                 `json:"hostname"`
	ImageDigest string                 `json:"imageDigest,omitempty"`
	Labels      map[string]string      `json:"labels,omitempty"`
	Taints      []corev1.Taint         `json:"taints"`
	Kubelet     kubefarmv1.KubeletSpec `json:"kubelet"`
	// RegistryMirrors are the pool's, for containerd's hosts.toml files.
	RegistryMirrors []kubefarmv1.RegistryMirror `json:"registryMirrors,omitempty"`
	// JoinToken is the bootstrap token for this machine alone.
	JoinToken string `json:"joinToken"`
	// RebootAfterLogin is the pool's rollout.rebootAfterLogin: how long
	// after the first interactive login the agent raises RebootRequired
	// (InteractiveLogin). Nil: never.
	RebootAfterLogin *metav1.Duration `json:"rebootAfterLogin,omitempty"`

	// The tenant cluster as its nodes see it (TenantFacts); empty when
	// kubefarm-pxe has no source for them, and then the agent cannot join.
	TenantFacts `json:",inline"`

	// The pool's spec.host (what kubefarm's ltsp.config carried), all
	// optional: the node's time zone (an IANA name such as Europe/Berlin),
	// the root account's SSH authorized keys and its password hash
	// (crypt(3) form, e.g. $6$...). The agent applies what is set.
	Timezone          string   `json:"timezone,omitempty"`
	SSHAuthorizedKeys []string `json:"sshAuthorizedKeys,omitempty"`
	RootPasswordHash  string   `json:"rootPasswordHash,omitempty"`
}

// TenantFacts are what a node needs to know of its tenant cluster to join
// it (bootstraptoken.NodeFacts: kubefarm-manager publishes them beside the
// token issuer's credential).
type TenantFacts = bootstraptoken.NodeFacts

// Tenants looks up the TenantFacts of a machine's tenant cluster for
// /config. An error is the server's (the tenant is not reachable or not
// ready): /config answers 503 without consuming the boot window, and the
// agent retries.
type Tenants interface {
	Facts(ctx context.Context, m *kubefarmv1.Machine) (TenantFacts, error)
}

// NodeConfigFor derives a machine's node configuration from its pool: the
// pool's labels and taints, then each tag's, the pool's `all` tag first and
// then the machine's in their order (internal/machineconfig; a
// later tag overrides an earlier one for the same label key, or the same
// taint key and effect), then the network-unavailable taint. Pure: the join
// token is added by the caller.
func NodeConfigFor(m *kubefarmv1.Machine, pool *kubefarmv1.NodePool) (NodeConfig, error) {
	if m == nil || pool == nil {
		return NodeConfig{}, errors.New("machine and pool are required")
	}
	if m.Namespace != pool.Namespace || m.Spec.Pool != pool.Name {
		return NodeConfig{}, fmt.Errorf("machine %s/%s is not in pool %s/%s", m.Namespace, m.Name, pool.Namespace, pool.Name)
	}
	resolved, err := machineconfig.Resolve(pool, m.Spec.Tags)
	if err != nil {
		return NodeConfig{}, err
	}
	// The network-unavailable taint last: it replaces a tag's taint of the
	// same key and effect in place, so no pool can schedule pods before the
	// agent has verified the CNI chain.
	taints := resolved.Taints
	if i := slices.IndexFunc(taints, func(t corev1.Taint) bool {
		return t.Key == NetworkUnavailableTaint.Key && t.Effect == NetworkUnavailableTaint.Effect
	}); i >= 0 {
		taints[i] = NetworkUnavailableTaint
	} else {
		taints = append(taints, NetworkUnavailableTaint)
	}
	out := NodeConfig{
		Machine:  machineKey(m),
		Cluster:  m.Spec.Cluster,
		Hostname: m.Spec.Hostname,
		Kubelet:  pool.Spec.Kubelet,
		Taints:   taints,

		RegistryMirrors:  pool.Spec.RegistryMirrors,
		RebootAfterLogin: pool.Spec.Rollout.RebootAfterLogin,

		Timezone:          pool.Spec.Host.Timezone,
		SSHAuthorizedKeys: pool.Spec.Host.SSHAuthorizedKeys,
		RootPasswordHash:  pool.Spec.Host.RootPasswordHash,
	}
	if _, d := ImageFor(m); d != "" {
		out.ImageDigest = d
	}
	if len(resolved.Labels) > 0 {
		out.Labels = resolved.Labels
	}
	return out, nil
}

// JoinTokens issues the per-machine bootstrap token of the tenant cluster.
// It must return a token valid for this machine alone, short-lived and
// single-use; the implementation lives with the tenant cluster client.
type JoinTokens interface {
	Issue(ctx context.Context, m *kubefarmv1.Machine) (string, error)
}

// BootWindows is one replica's memory of the boots in progress, the steps
// that hand a booting machine its secret and its configuration
// (docs/security.md):
//
//  1. Arm: this replica answered the DHCP request of an iPXE client with
//     the machine's MAC. Only the machine itself can send that (a pod's
//     packets are routed off the node, never bridged onto the boot
//     network), and iPXE is what fetches the script and the secret next.
//  2. Issue: GET /secret/<mac> from the machine's leased IP takes the arm
//     and mints the boot's secret. Without an arm nothing is minted, so a
//     pod that fetches the script, or asks for the secret, long after the
//     boot gets nothing.
//  3. Consume: GET /config/<mac> with that secret takes the configuration
//     window, once.
//
// Arms and windows close after TTL. It is per replica on purpose: the DHCP
// answer that armed it names this replica, so iPXE and the agent of that
// boot ask this replica; a replica that restarts forgets its arms and
// windows, and the machine must boot again, which fails safe. What outlives
// a restart is the secret's hash in the Machine's status.bootCredential,
// which every replica checks reports and heartbeats against.
type BootWindows struct {
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex
	armed map[string]time.Time  // MAC -> when its DHCP was answered
	boots map[string]*bootEntry // machine key -> its current boot's secret
}

type bootEntry struct {
	hash   string    // bootsecret.Secret.Hash of the boot's secret
	opened time.Time // when the secret was issued: the window's start
	taken  bool      // the configuration was served
}

// NewBootWindows makes a tracker; now is the clock (time.Now when nil).
func NewBootWindows(ttl time.Duration, now func() time.Time) *BootWindows {
	if now == nil {
		now = time.Now
	}
	return &BootWindows{ttl: ttl, now: now, armed: map[string]time.Time{}, boots: map[string]*bootEntry{}}
}

// sweepEvery: the maps are swept of expired entries now and then so that
// they stay the size of the machines booting within one TTL.
const sweepEvery = 256

func (w *BootWindows) sweep(now time.Time) {
	if n := len(w.armed) + len(w.boots); n < 1024 || n%sweepEvery != 0 {
		return
	}
	for k, t := range w.armed {
		if now.Sub(t) > w.ttl {
			delete(w.armed, k)
		}
	}
	for k, b := range w.boots {
		if now.Sub(b.opened) > w.ttl {
			delete(w.boots, k)
		}
	}
}

// Arm records that this replica answered an iPXE client's DHCP request
// from mac (lower-case colon form): the machine is booting now.
func (w *BootWindows) Arm(mac string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	w.sweep(now)
	w.armed[mac] = now
}

// Armed reports whether mac's boot is armed, without taking the arm.
func (w *BootWindows) Armed(mac string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.armed[mac]
	return ok && w.now().Sub(t) <= w.ttl
}

// armedAt is when mac was armed (zero when it is not).
func (w *BootWindows) armedAt(mac string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.armed[mac]
}

// Issue takes mac's arm and mints the secret of machine key's boot; false
// when mac is not armed (no DHCP answered for it within TTL, or its secret
// was already issued). The new secret replaces any earlier boot's.
func (w *BootWindows) Issue(mac, key string) (bootsecret.Secret, bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	t, ok := w.armed[mac]
	delete(w.armed, mac)
	if !ok || now.Sub(t) > w.ttl {
		return "", false, nil
	}
	s, err := bootsecret.Generate(nil)
	if err != nil {
		w.armed[mac] = t
		return "", false, err
	}
	w.boots[key] = &bootEntry{hash: s.Hash(), opened: now}
	return s, true, nil
}

// Unissue undoes an Issue whose secret never reached the machine (the
// status write failed): the arm is back, with its first time, and the
// boot's entry is gone.
func (w *BootWindows) Unissue(mac, key string, s bootsecret.Secret, armed time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if b, ok := w.boots[key]; ok && s.Matches(b.hash) {
		delete(w.boots, key)
	}
	if _, ok := w.armed[mac]; !ok {
		w.armed[mac] = armed
	}
}

// Pending reports whether key's configuration window is open for s: s is
// its boot's secret, the window has not expired and the configuration has
// not been served.
func (w *BootWindows) Pending(key string, s bootsecret.Secret) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	b, ok := w.boots[key]
	return ok && !b.taken && w.now().Sub(b.opened) <= w.ttl && s.Matches(b.hash)
}

// Consume takes key's configuration window for s. It returns when the
// window opened and whether it was open for s.
func (w *BootWindows) Consume(key string, s bootsecret.Secret) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	b, ok := w.boots[key]
	if !ok || b.taken || w.now().Sub(b.opened) > w.ttl || !s.Matches(b.hash) {
		return time.Time{}, false
	}
	b.taken = true
	return b.opened, true
}

// Restore reopens a window consumed by a request that then failed for a
// reason of the server's (e.g. the token issuer was unreachable), keeping
// its original opening time so that retries cannot extend it. A newer boot
// of the machine meanwhile is left alone.
func (w *BootWindows) Restore(key string, s bootsecret.Secret) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if b, ok := w.boots[key]; ok && s.Matches(b.hash) {
		b.taken = false
	}
}

// Knows reports whether s is the secret this replica issued for key's
// latest boot, whatever the window: the Machine's status may not show the
// hash yet when the boot's first report arrives.
func (w *BootWindows) Knows(key string, s bootsecret.Secret) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	b, ok := w.boots[key]
	return ok && s.Matches(b.hash)
}

// BootReport is what the agent posts to /report after a boot.
type BootReport struct {
	MAC         string `json:"mac"`
	BootID      string `json:"bootID"`
	ImageDigest string `json:"imageDigest"`
	// Network is the agent's verdict on the node's CNI chain; absent in
	// reports of agents (or the initrd) that do not check it.
	Network *NetworkVerdict `json:"network,omitempty"`
	// Error is set by the initrd when the boot stopped before the root
	// filesystem (a digest mismatch, a download that never completed): the
	// machine did not boot the image, so the report becomes a Warning event
	// (BootFailed) and not a lastBoot record. At most MaxBootError bytes of
	// printable text.
	Error string `json:"error,omitempty"`
}

// MaxBootError bounds a failed boot's error: it becomes an event message.
const MaxBootError = 512

// NetworkVerdict is the result of the agent's CNI chain check
// (ARCHITECTURE.md, boot step 4).
type NetworkVerdict struct {
	Verified bool `json:"verified"`
	// Reason says what failed, or what was checked; at most
	// MaxNetworkReason bytes of printable text.
	Reason string `json:"reason"`
}

// MaxNetworkReason bounds a verdict's reason: it becomes a condition
// message and an event, both read by people.
const MaxNetworkReason = 512

// Validate checks the report's fields; MAC is returned normalised.
func (r BootReport) Validate() (string, error) {
	mac, err := NormalizeMAC(r.MAC)
	if err != nil {
		return "", err
	}
	if !validBootID(r.BootID) {
		return "", errors.New("bootID must be a UUID as in /proc/sys/kernel/random/boot_id")
	}
	if !validDigest(r.ImageDigest) {
		return "", errors.New("imageDigest must be sha256:<64 hex>")
	}
	if len(r.Error) > MaxBootError {
		return "", fmt.Errorf("error is %d bytes, over %d", len(r.Error), MaxBootError)
	}
	if !printable(r.Error) {
		return "", errors.New("error must be printable text")
	}
	if r.Error != "" && r.Network != nil {
		return "", errors.New("a failed boot (error) carries no network verdict")
	}
	if n := r.Network; n != nil {
		if len(n.Reason) > MaxNetworkReason {
			return "", fmt.Errorf("network.reason is %d bytes, over %d", len(n.Reason), MaxNetworkReason)
		}
		if !n.Verified && n.Reason == "" {
			return "", errors.New("network.reason is required when network.verified is false")
		}
		if !printable(n.Reason) {
			return "", errors.New("network.reason must be printable text")
		}
	}
	return mac, nil
}

// printable: valid, printable UTF-8 only, since report text is shown by
// kubectl and in logs.
func printable(s string) bool {
	for _, c := range s {
		if c == utf8.RuneError || !unicode.IsPrint(c) {
			return false
		}
	}
	return true
}

// NetworkCondition is the Machine's NetworkVerified condition for a report
// of boot bootID: True or False with the agent's reason, Unknown when the
// report carried no verdict. The boot ID is in the message, so that what
// the condition refers to is visible; it is written in the same status
// write as lastBoot, which is what the manager compares against.
func NetworkCondition(bootID string, v *NetworkVerdict) metav1.Condition {
	c := metav1.Condition{Type: kubefarmv1.ConditionNetworkVerified}
	switch {
	case v == nil:
		c.Status, c.Reason = metav1.ConditionUnknown, kubefarmv1.ReasonNetworkNotReported
		c.Message = kubefarmv1.BootMessage(bootID, "the report carried no network verdict")
	case v.Verified:
		c.Status, c.Reason = metav1.ConditionTrue, kubefarmv1.ReasonCNIChainVerified
		c.Message = kubefarmv1.BootMessage(bootID, v.Reason)
	default:
		c.Status, c.Reason = metav1.ConditionFalse, kubefarmv1.ReasonCNIChainInvalid
		c.Message = kubefarmv1.BootMessage(bootID, v.Reason)
	}
	return c
}

// validBootID accepts the kernel's boot_id form: 8-4-4-4-12 lower-case hex.
func validBootID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// BootRecorder writes what the agent reports in a machine's status.
type BootRecorder interface {
	// RecordBoot writes status.lastBoot and, in the same write, its
	// NetworkVerified condition (network; see NetworkCondition) and the
	// conditions in also (RebootRequired False, for a new boot).
	RecordBoot(ctx context.Context, m *kubefarmv1.Machine, rec kubefarmv1.BootRecord, network metav1.Condition, also ...metav1.Condition) error
	// RequireReboot writes the RebootRequired condition c, and nothing
	// else, for the boot of m's status.lastBoot.
	RequireReboot(ctx context.Context, m *kubefarmv1.Machine, c metav1.Condition) error
	// RecordCredential writes status.bootCredential, and nothing else:
	// the hash of the secret issued to the boot now starting.
	RecordCredential(ctx context.Context, m *kubefarmv1.Machine, c kubefarmv1.BootCredential) error
}

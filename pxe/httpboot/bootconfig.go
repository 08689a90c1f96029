package httpboot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/machineconfig"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
	"github.com/kubefarm/kubefarm/pxe/bootsecret"
	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

// Tenants looks up the TenantFacts of a machine's tenant cluster for
// /config. An error is the server's (the tenant is not reachable or not
// ready): /config answers 503 without consuming the boot window, and the
// agent retries.
type Tenants interface {
	Facts(ctx context.Context, m *kubefarmv1.Machine) (nodeconfig.TenantFacts, error)
}

// NodeConfigFor derives a machine's node configuration from its pool: the
// pool's labels and taints, then each tag's, the pool's `all` tag first and
// then the machine's in their order (internal/machineconfig; a
// later tag overrides an earlier one for the same label key, or the same
// taint key and effect), then the network-unavailable taint. Pure: the join
// token is added by the caller.
func NodeConfigFor(m *kubefarmv1.Machine, pool *kubefarmv1.NodePool) (nodeconfig.NodeConfig, error) {
	if m == nil || pool == nil {
		return nodeconfig.NodeConfig{}, errors.New("machine and pool are required")
	}
	if m.Namespace != pool.Namespace || m.Spec.Pool != pool.Name {
		return nodeconfig.NodeConfig{}, fmt.Errorf("machine %s/%s is not in pool %s/%s", m.Namespace, m.Name, pool.Namespace, pool.Name)
	}
	resolved, err := machineconfig.Resolve(pool, m.Spec.Tags)
	if err != nil {
		return nodeconfig.NodeConfig{}, err
	}
	// The network-unavailable taint last: it replaces a tag's taint of the
	// same key and effect in place, so no pool can schedule pods before the
	// agent has verified the CNI chain.
	taints := resolved.Taints
	if i := slices.IndexFunc(taints, func(t corev1.Taint) bool {
		return t.Key == nodeconfig.NetworkUnavailableTaint.Key && t.Effect == nodeconfig.NetworkUnavailableTaint.Effect
	}); i >= 0 {
		taints[i] = nodeconfig.NetworkUnavailableTaint
	} else {
		taints = append(taints, nodeconfig.NetworkUnavailableTaint)
	}
	out := nodeconfig.NodeConfig{
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
	if out.Network, err = nodeconfig.MachineNetwork(m, pool); err != nil {
		return nodeconfig.NodeConfig{}, err
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
	armed  time.Time // when the DHCP answer armed the boot (for Unissue)
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
	w.boots[key] = &bootEntry{hash: s.Hash(), armed: t, opened: now}
	return s, true, nil
}

// Unissue undoes an Issue whose secret never reached the machine (the
// status write failed): the boot's entry is gone and its arm is back, with
// its first time, unless a newer DHCP answer armed the machine meanwhile.
func (w *BootWindows) Unissue(mac, key string, s bootsecret.Secret) {
	w.mu.Lock()
	defer w.mu.Unlock()
	b, ok := w.boots[key]
	if !ok || !s.Matches(b.hash) {
		return
	}
	delete(w.boots, key)
	if _, ok := w.armed[mac]; !ok {
		w.armed[mac] = b.armed
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

// NetworkCondition is the Machine's NetworkVerified condition for a report
// of boot bootID: True or False with the agent's reason, Unknown when the
// report carried no verdict. The boot ID is in the message, so that what
// the condition refers to is visible; it is written in the same status
// write as lastBoot, which is what the manager compares against.
func NetworkCondition(bootID string, v *bootproto.NetworkVerdict) metav1.Condition {
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

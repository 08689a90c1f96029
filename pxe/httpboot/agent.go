package httpboot

// What kubefarm-agent asks once the node runs: its boot configuration
// (/config) and the report of what it booted (/report), both only from the
// machine's leased address. Its heartbeats (/heartbeat) are in
// heartbeat.go.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
	"github.com/kubefarm/kubefarm/pxe/bootsecret"
	"github.com/kubefarm/kubefarm/pxe/events"
	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

// forbidden answers 403 with one body for every reason, so that a prober
// learns nothing about which MACs exist or whose IP it lacks; the reason
// goes to the log.
func (h *Handler) forbidden(w http.ResponseWriter, r *http.Request, reason string, kv ...any) {
	h.log.Info("agent request refused", append([]any{"reason", reason, "peer", r.RemoteAddr, "path", r.URL.Path}, kv...)...)
	http.Error(w, "forbidden", http.StatusForbidden)
}

// refused is forbidden for a request that names a known machine: the
// machine also gets a Warning event, so that `kubectl describe` shows
// someone asking for its credentials from the wrong place or time. The
// request path carries only the MAC, never a secret.
func (h *Handler) refused(w http.ResponseWriter, r *http.Request, m *kubefarmv1.Machine, reason string) {
	key := machineKey(m)
	h.forbidden(w, r, reason, "machine", key)
	if h.cfg.Events != nil && h.cfg.Events.Due(key, events.ReasonRefused, reason) {
		h.cfg.Events.Warning(key, events.ReasonRefused, reason, fmt.Sprintf("refused %s %s from %s: %s", r.Method, r.URL.Path, peerHost(r), reason))
	}
}

// peerMachine finds the machine of mac and checks that the request comes
// from the address it leases. It answers the request itself when not.
func (h *Handler) peerMachine(w http.ResponseWriter, r *http.Request, rawMAC string) (*kubefarmv1.Machine, bool) {
	mac, err := bootproto.NormalizeMAC(rawMAC)
	if err != nil {
		h.forbidden(w, r, "bad MAC")
		return nil, false
	}
	m, ok := h.machines.ByMAC(mac)
	if !ok {
		h.forbidden(w, r, "unknown MAC", "mac", mac)
		return nil, false
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	peer := net.ParseIP(host)
	if err != nil || peer == nil || !peer.Equal(net.ParseIP(m.Spec.IP)) {
		h.refused(w, r, m, "not from the machine's leased IP "+m.Spec.IP)
		return nil, false
	}
	return m, true
}

// secret issues the boot's secret to the booting machine: only to its
// leased IP, and only when this replica answered its iPXE's DHCP request
// within the boot window (BootWindows), once per such answer. The secret's
// hash is in the Machine's status before the archive leaves.
func (h *Handler) secret(w http.ResponseWriter, r *http.Request, rawMAC string) {
	if h.cfg.Windows == nil {
		h.forbidden(w, r, "boot secrets disabled")
		return
	}
	m, ok := h.peerMachine(w, r, rawMAC)
	if !ok {
		return
	}
	mac, _ := bootproto.NormalizeMAC(rawMAC)
	key := machineKey(m)
	log := h.log.WithValues("machine", key, "peer", r.RemoteAddr)
	if h.cfg.Recorder == nil {
		log.Info("no status recorder: cannot keep a boot secret")
		http.Error(w, "boot secrets not available", http.StatusServiceUnavailable)
		return
	}
	s, ok, err := h.cfg.Windows.Issue(mac, key)
	if err != nil {
		log.Error(err, "minting a boot secret")
		http.Error(w, "boot secrets not available", http.StatusServiceUnavailable)
		return
	}
	if !ok {
		h.refused(w, r, m, noArm)
		return
	}
	body, err := bootsecret.Archive(s)
	if err != nil {
		h.cfg.Windows.Unissue(mac, key, s)
		log.Error(err, "packing the boot secret")
		http.Error(w, "boot secrets not available", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := apiWriteContext(r)
	defer cancel()
	cred := kubefarmv1.BootCredential{SHA256: s.Hash(), Issued: metav1.NewTime(time.Now())}
	if err := h.cfg.Recorder.RecordCredential(ctx, m, cred); err != nil {
		// Without the hash in the status no other replica, nor this one
		// after a restart, could check the boot's heartbeats.
		h.cfg.Windows.Unissue(mac, key, s)
		log.Error(err, "recording the boot credential")
		http.Error(w, "cannot record the boot credential", http.StatusServiceUnavailable)
		return
	}
	log.Info("issued the boot secret")
	h.normal(key, events.ReasonSecretIssued, "", func() string {
		return fmt.Sprintf("issued this boot's secret to %s (status.bootCredential %s)", peerHost(r), cred.SHA256[:19])
	})
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// noArm is the refusal of a /secret request without a boot in progress.
const noArm = "no boot in progress (this replica answered no DHCP request of the machine's iPXE within the boot window, or the secret was already issued)"

// noSecret is the refusal of an agent request without its boot's secret.
const noSecret = "no valid boot secret (Authorization: Bearer) for the machine's current boot"

// authenticated reports whether r carries the secret of m's current boot:
// the one whose hash is in m's status, or the one this replica issued for
// it last (the status may lag behind in the cache).
func (h *Handler) authenticated(r *http.Request, m *kubefarmv1.Machine) (bootsecret.Secret, bool) {
	s, ok := bootsecret.FromRequest(r)
	if !ok {
		return "", false
	}
	if c := m.Status.BootCredential; c != nil && s.Matches(c.SHA256) {
		return s, true
	}
	return s, h.cfg.Windows != nil && h.cfg.Windows.Knows(machineKey(m), s)
}

// config serves the machine's boot configuration with its join token:
// only to the machine's leased IP, for its MAC, with the secret this
// replica issued to the boot, inside its window, once. Anything else is
// 403.
func (h *Handler) config(w http.ResponseWriter, r *http.Request, rawMAC string) {
	if h.cfg.Windows == nil {
		h.forbidden(w, r, "boot configuration disabled")
		return
	}
	m, ok := h.peerMachine(w, r, rawMAC)
	if !ok {
		return
	}
	key := machineKey(m)
	s, ok := bootsecret.FromRequest(r)
	if !ok {
		h.refused(w, r, m, noSecret)
		return
	}
	log := h.log.WithValues("machine", key, "peer", r.RemoteAddr)
	nc, ok := h.nodeConfig(w, m, log)
	if !ok {
		return
	}
	if !h.joinable(w, r, m, s, &nc, log) {
		return
	}
	h.issueConfig(w, r, m, s, nc, log)
}

// nodeConfig is m's configuration built from its pool, without the join
// token; false when it answered 503 (the agent retries).
func (h *Handler) nodeConfig(w http.ResponseWriter, m *kubefarmv1.Machine, log logr.Logger) (nodeconfig.NodeConfig, bool) {
	pool, ok := h.machines.Pool(m.Namespace, m.Spec.Pool)
	if !ok {
		log.Info("machine's pool not found", "pool", m.Spec.Pool)
		http.Error(w, "node pool not available", http.StatusServiceUnavailable)
		return nodeconfig.NodeConfig{}, false
	}
	nc, err := NodeConfigFor(m, pool)
	if err != nil {
		log.Error(err, "building node configuration")
		http.Error(w, "cannot build node configuration", http.StatusServiceUnavailable)
		return nodeconfig.NodeConfig{}, false
	}
	return nc, true
}

// joinable checks that a join token can be issued to the boot of s and
// sets the tenant's facts on nc; false when it answered. Nothing here
// consumes the boot's window.
func (h *Handler) joinable(w http.ResponseWriter, r *http.Request, m *kubefarmv1.Machine, s bootsecret.Secret,
	nc *nodeconfig.NodeConfig, log logr.Logger) bool {
	key := machineKey(m)
	if h.cfg.Tokens == nil {
		if h.cfg.Windows.Pending(key, s) {
			log.Info("no join token issuer configured")
			http.Error(w, "join credentials not available", http.StatusServiceUnavailable)
			return false
		}
		h.refused(w, r, m, noWindow)
		return false
	}
	if h.cfg.Tenants != nil && h.cfg.Windows.Pending(key, s) {
		// Before the window is consumed: a tenant not reachable yet costs
		// the agent a retry, not its boot.
		ctx, cancel := apiWriteContext(r)
		facts, err := h.cfg.Tenants.Facts(ctx, m)
		cancel()
		if err != nil {
			log.Error(err, "looking up the tenant cluster's facts")
			http.Error(w, "tenant cluster not available", http.StatusServiceUnavailable)
			return false
		}
		nc.TenantFacts = facts
	}
	return true
}

// issueConfig consumes the boot's window, issues the join token into nc
// and serves it. A failure after the window was consumed restores it, so
// the agent's retry is still served.
func (h *Handler) issueConfig(w http.ResponseWriter, r *http.Request, m *kubefarmv1.Machine, s bootsecret.Secret,
	nc nodeconfig.NodeConfig, log logr.Logger) {
	key := machineKey(m)
	opened, ok := h.cfg.Windows.Consume(key, s)
	if !ok {
		h.refused(w, r, m, noWindow)
		return
	}
	ctx, cancel := apiWriteContext(r)
	defer cancel()
	tok, err := h.cfg.Tokens.Issue(ctx, m)
	if err != nil {
		h.cfg.Windows.Restore(key, s)
		log.Error(err, "issuing join token")
		http.Error(w, "join credentials not available", http.StatusServiceUnavailable)
		return
	}
	nc.JoinToken = tok
	body, err := json.Marshal(nc)
	if err != nil {
		h.cfg.Windows.Restore(key, s)
		log.Error(err, "encoding node configuration")
		http.Error(w, "cannot encode node configuration", http.StatusServiceUnavailable)
		return
	}
	log.Info("served boot configuration")
	h.normal(key, events.ReasonConfigServed, "", func() string {
		return fmt.Sprintf("served the boot configuration with a join token to %s, %s after the boot's secret was issued",
			peerHost(r), time.Since(opened).Round(time.Second))
	})
	w.Header().Set("Content-Type", "application/json")
	// It carries a credential: no cache anywhere may keep it.
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(body)
}

// noWindow is the refusal of a /config request outside its boot window.
const noWindow = "no open configuration window for this secret (already used, expired, or not the secret this replica issued to the boot)"

// APIWriteTimeout bounds an API write a request makes: issuing a join
// token, recording a boot.
const APIWriteTimeout = 30 * time.Second

// apiWriteContext is the context of an API write made for r: r's values
// without its cancellation, bounded by APIWriteTimeout. net/http cancels a
// request's context as soon as it reads EOF on the connection, which is
// also what a client that half-closes after its request sends (busybox nc
// does) while it still waits for the answer. Abandoning the write then
// would answer 503 about a write that may well land, and the client's
// retry would be cut short the same way.
func apiWriteContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), APIWriteTimeout)
}

// maxReport bounds a report body; a real one is about 150 bytes, 700 with
// a network verdict of MaxNetworkReason.
const maxReport = 4096

// report records what a machine booted in its status.lastBoot. Only the
// machine's leased IP may report for its MAC.
func (h *Handler) report(w http.ResponseWriter, r *http.Request) {
	rep, ok := readReport(w, r)
	if !ok {
		return
	}
	m, ok := h.peerMachine(w, r, rep.MAC)
	if !ok {
		return
	}
	if _, ok := h.authenticated(r, m); !ok {
		h.refused(w, r, m, noSecret)
		return
	}
	key := machineKey(m)
	log := h.log.WithValues("machine", key, "peer", r.RemoteAddr, "bootID", rep.BootID, "image", rep.ImageDigest)
	if rep.Error != "" {
		// The initrd stopped before the image: nothing booted, so
		// lastBoot keeps the boot that did. The operator learns why from
		// the event and the log; the machine's console says the same.
		log.Info("boot failed in the initrd", "error", rep.Error)
		if h.cfg.Events != nil && h.cfg.Events.Due(key, events.ReasonBootFailed, rep.ImageDigest) {
			h.cfg.Events.Warning(key, events.ReasonBootFailed, rep.ImageDigest,
				fmt.Sprintf("boot of %s stopped in the initrd: %s", rep.ImageDigest, rep.Error))
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	h.recordBoot(w, r, m, rep, log)
}

// readReport decodes and validates the report of r's body; false when it
// answered 400.
func readReport(w http.ResponseWriter, r *http.Request) (bootproto.BootReport, bool) {
	var rep bootproto.BootReport
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxReport))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		http.Error(w, "bad report", http.StatusBadRequest)
		return rep, false
	}
	if _, err := rep.Validate(); err != nil {
		http.Error(w, "bad report: "+err.Error(), http.StatusBadRequest)
		return rep, false
	}
	return rep, true
}

// recordBoot writes the boot rep reports into m's status (lastBoot, the
// network condition, a new boot's RebootRequired) unless it is there
// already, and records its Events.
func (h *Handler) recordBoot(w http.ResponseWriter, r *http.Request, m *kubefarmv1.Machine, rep bootproto.BootReport, log logr.Logger) {
	key := machineKey(m)
	network := NetworkCondition(rep.BootID, rep.Network)
	if lb := m.Status.LastBoot; lb != nil && lb.BootID == rep.BootID && lb.ImageDigest == rep.ImageDigest &&
		sameCondition(meta.FindStatusCondition(m.Status.Conditions, network.Type), network) {
		// Agents retry; a repeat is not a new boot and needs no write.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if h.cfg.Recorder == nil {
		http.Error(w, "boot reports not recorded here", http.StatusServiceUnavailable)
		return
	}
	rec := kubefarmv1.BootRecord{BootID: rep.BootID, ImageDigest: rep.ImageDigest, Time: metav1.NewTime(time.Now())}
	var also []metav1.Condition
	if c := rebootRequiredOnBoot(m, rep.BootID); c != nil {
		// A new boot is pristine: its RebootRequired is False, in the
		// write that records it.
		also = append(also, *c)
	}
	ctx, cancel := apiWriteContext(r)
	defer cancel()
	if err := h.cfg.Recorder.RecordBoot(ctx, m, rec, network, also...); err != nil {
		log.Error(err, "recording boot")
		http.Error(w, "cannot record boot", http.StatusServiceUnavailable)
		return
	}
	log.Info("boot recorded")
	h.normal(key, events.ReasonBootReported, rep.BootID, func() string {
		return fmt.Sprintf("booted %s, boot ID %s", rep.ImageDigest, rep.BootID)
	})
	if network.Status == metav1.ConditionFalse && h.cfg.Events != nil && h.cfg.Events.Due(key, events.ReasonNetworkUnverified, rep.BootID) {
		h.cfg.Events.Warning(key, events.ReasonNetworkUnverified, rep.BootID, network.Message)
	}
	w.WriteHeader(http.StatusNoContent)
}

// sameCondition reports whether have already says what want says; the
// transition time is the API's business.
func sameCondition(have *metav1.Condition, want metav1.Condition) bool {
	return have != nil && have.Status == want.Status && have.Reason == want.Reason && have.Message == want.Message
}

package httpboot

// POST /heartbeat: the running node's agent asks, every few seconds,
// whether the rollout wants this boot replaced, and says whether it wants
// that itself (the drift signal). Nothing connects to the machines; they
// pull, from the address they lease, like /report.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
)

// maxHeartbeat bounds a heartbeat body; a real one is about 100 bytes, 400
// with a signal whose message is MaxRebootMessage.
const maxHeartbeat = 2048

// The reasons of the Machine's RebootRequired condition are the API's
// (kubefarmv1.ReasonInteractiveLogin, ReasonRebootRequiredFile, ReasonNewBoot).
const (
	reasonInteractiveLogin   = kubefarmv1.ReasonInteractiveLogin
	reasonRebootRequiredFile = kubefarmv1.ReasonRebootRequiredFile
	reasonNewBoot            = kubefarmv1.ReasonNewBoot
)

// FieldOwner is the field manager of kubefarm-pxe's writes to Machines'
// status: the boot report's merge patch (lastBoot, NetworkVerified, the
// RebootRequired a new boot clears) and the heartbeat's server-side apply of
// RebootRequired.
const FieldOwner = "kubefarm-pxe"

// parseHeartbeat decodes and validates a heartbeat body (already bounded by
// maxHeartbeat), with its MAC normalised. Fields it does not know are
// ignored, unlike /report's: a heartbeat is how a node learns it must
// reboot, and an agent newer than this server must still hear that.
func parseHeartbeat(body []byte) (bootproto.Heartbeat, error) {
	var hb bootproto.Heartbeat
	if err := json.Unmarshal(body, &hb); err != nil {
		// Not the decoder's message: it may quote the body.
		return bootproto.Heartbeat{}, errors.New("not a JSON heartbeat")
	}
	mac, err := hb.Validate()
	if err != nil {
		return bootproto.Heartbeat{}, err
	}
	hb.MAC = mac
	return hb, nil
}

// heartbeat answers whether the machine should reboot now and records its
// drift signal. Only the machine's leased IP may send heartbeats for its
// MAC. The answer comes from the cache; a heartbeat writes to the API only
// to raise RebootRequired, once per boot.
func (h *Handler) heartbeat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxHeartbeat))
	if err != nil {
		http.Error(w, "bad heartbeat", http.StatusBadRequest)
		return
	}
	hb, err := parseHeartbeat(body)
	if err != nil {
		http.Error(w, "bad heartbeat: "+err.Error(), http.StatusBadRequest)
		return
	}
	m, ok := h.peerMachine(w, r, hb.MAC)
	if !ok {
		return
	}
	if _, ok := h.authenticated(r, m); !ok {
		h.refused(w, r, m, noSecret)
		return
	}
	log := h.log.WithValues("machine", machineKey(m), "peer", r.RemoteAddr, "bootID", hb.BootID)
	reply := bootproto.HeartbeatReply{Reboot: rebootRequested(m, hb.BootID)}
	if reply.Reboot {
		log.Info("asking the node to reboot: the rollout is Rebooting this boot")
	}
	if c, ok := rebootRequiredToRaise(m, hb, time.Now()); ok {
		err := errors.New("boot reports not recorded here")
		if h.cfg.Recorder != nil {
			ctx, cancel := apiWriteContext(r)
			err = h.cfg.Recorder.RequireReboot(ctx, m, c)
			cancel()
		}
		switch {
		case err == nil:
			log.Info("reboot required", "reason", c.Reason, "message", c.Message)
		case reply.Reboot:
			// The reboot replaces the boot the signal is about; the
			// answer matters more than the record.
			log.Error(err, "recording RebootRequired")
		default:
			// The agent sends the signal again with its next heartbeat.
			log.Error(err, "recording RebootRequired")
			http.Error(w, "cannot record the reboot request", http.StatusServiceUnavailable)
			return
		}
	}
	b, err := json.Marshal(reply)
	if err != nil {
		http.Error(w, "cannot encode the reply", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// rebootRequested: the rollout controller has moved the machine to its
// Rebooting phase (in the write that switched its servedImage) for the boot
// bootID, the one it ran then.
func rebootRequested(m *kubefarmv1.Machine, bootID string) bool {
	ro := m.Status.Rollout
	return ro != nil && ro.Phase == kubefarmv1.RolloutRebooting && ro.PreviousBootID != "" && ro.PreviousBootID == bootID
}

// rebootRequiredToRaise is the RebootRequired condition a heartbeat asks
// for, and whether it must be written: only for the boot of
// status.lastBoot (an agent of another boot cannot raise it for this one),
// and only when the condition is not already True for that boot.
func rebootRequiredToRaise(m *kubefarmv1.Machine, hb bootproto.Heartbeat, now time.Time) (metav1.Condition, bool) {
	sig := hb.RebootRequired
	if sig == nil || m.Status.LastBoot == nil || m.Status.LastBoot.BootID != hb.BootID {
		return metav1.Condition{}, false
	}
	have := meta.FindStatusCondition(m.Status.Conditions, kubefarmv1.ConditionRebootRequired)
	if have != nil && have.Status == metav1.ConditionTrue && kubefarmv1.OfBoot(have, hb.BootID) {
		return metav1.Condition{}, false
	}
	c := metav1.Condition{
		Type:               kubefarmv1.ConditionRebootRequired,
		Status:             metav1.ConditionTrue,
		Reason:             sig.Reason,
		Message:            kubefarmv1.BootMessage(hb.BootID, sig.Message),
		LastTransitionTime: metav1.NewTime(now),
	}
	if have != nil && have.Status == metav1.ConditionTrue {
		c.LastTransitionTime = have.LastTransitionTime
	}
	return c, true
}

// rebootRequiredOnBoot is the RebootRequired condition a report of a new
// boot writes beside lastBoot: False, so that no True outlives the boot it
// was raised in. Nil when the machine never had the condition, or when the
// report is of the boot lastBoot already records.
func rebootRequiredOnBoot(m *kubefarmv1.Machine, bootID string) *metav1.Condition {
	if lb := m.Status.LastBoot; lb != nil && lb.BootID == bootID {
		return nil
	}
	if meta.FindStatusCondition(m.Status.Conditions, kubefarmv1.ConditionRebootRequired) == nil {
		return nil
	}
	return &metav1.Condition{
		Type:    kubefarmv1.ConditionRebootRequired,
		Status:  metav1.ConditionFalse,
		Reason:  reasonNewBoot,
		Message: kubefarmv1.BootMessage(bootID, ""),
	}
}

// RequireReboot implements BootRecorder: one server-side apply of the
// Machine's status that carries the RebootRequired condition alone, as
// FieldOwner, so that no other field of the status (lastBoot, the other
// conditions, the rollout's) is touched. The apply carries the
// resourceVersion of m, the copy the caller checked lastBoot on: if the
// machine has booted again meanwhile, the write conflicts instead of
// raising the signal for the new boot.
//
// The apply's field set is this one condition, always: the boot report
// writes with a merge patch, which never removes what an apply owns. Were
// the report turned into an apply under the same owner, each of the two
// would have to carry everything the other sets, or drop it.
func (s StatusRecorder) RequireReboot(ctx context.Context, m *kubefarmv1.Machine, c metav1.Condition) error {
	if c.Type != kubefarmv1.ConditionRebootRequired {
		return fmt.Errorf("RequireReboot writes %s, not %s", kubefarmv1.ConditionRebootRequired, c.Type)
	}
	cond := map[string]any{
		"type":               c.Type,
		"status":             string(c.Status),
		"reason":             c.Reason,
		"message":            c.Message,
		"lastTransitionTime": c.LastTransitionTime.UTC().Format(time.RFC3339),
	}
	if c.ObservedGeneration != 0 {
		cond["observedGeneration"] = c.ObservedGeneration
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kubefarmv1.GroupVersion.String(),
		"kind":       "Machine",
		"metadata": map[string]any{
			"name":            m.Name,
			"namespace":       m.Namespace,
			"resourceVersion": m.ResourceVersion,
		},
		"status": map[string]any{"conditions": []any{cond}},
	}}
	if m.ResourceVersion == "" {
		unstructured.RemoveNestedField(u.Object, "metadata", "resourceVersion")
	}
	if err := s.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying RebootRequired to machine %s: %w", machineKey(m), err)
	}
	return nil
}

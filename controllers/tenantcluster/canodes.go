package tenantcluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/machinestate"
	"github.com/kubefarm/kubefarm/internal/ssa"
)

// The cluster CA's rotation waits for the tenant's nodes (docs/pki.md):
// a node learns the CA at boot, and its kubelet's certificates are signed
// at boot, so a node booted before the new generation signed trusts only
// the old one and holds certificates of it. Such nodes are asked to
// reboot through their Machines' RebootRequired condition, which their
// pools' rolling reboot-to-update acts on (budgets, windows, gates); the
// serving certificates move to the new generation once none is left.

// CARotationFieldOwner owns the RebootRequired conditions the rotation
// writes on Machines: not FieldOwner, whose applies would otherwise drop
// the conditions other kubefarm-manager controllers write there.
const CARotationFieldOwner = "kubefarm-ca-rotation"

// nodeRebootPoll is how often a rotation waiting for reboots looks at the
// Machines again: a reboot takes minutes, and the Machines' status writes
// (heartbeats among them) are too many to wake every tenant on.
const nodeRebootPoll = 15 * time.Second

// clockMargin widens "before": the boot secret's time is kubefarm-pxe's
// clock and since is kubefarm-manager's. A boot that started up to this
// long after since is rebooted once more rather than trusted with
// certificates the old key may have signed.
const clockMargin = 30 * time.Second

// bootedBefore tells whether m runs a boot that started before since:
// its boot secret, handed out before the node fetched the CA and its
// kubelet asked for certificates, was issued earlier (within clockMargin).
// A Machine whose node is not Ready does not hold the rotation (off, or
// failing anyway); it is still asked to reboot when it reported the boot
// it runs.
func bootedBefore(m *v1alpha1.Machine, since time.Time) (running, stale bool) {
	cred := m.Status.BootCredential
	if cred == nil || !cred.Issued.Time.Before(since.Add(clockMargin)) {
		return false, false
	}
	return meta.IsStatusConditionTrue(m.Status.Conditions, v1alpha1.ConditionNodeReady), true
}

// nodesRebootedSince raises RebootRequired on every Machine of the tenant
// whose boot started before since, and tells which of them still run a
// Ready node (sorted names; none means the nodes rebooted).
func (r *Reconciler) nodesRebootedSince(ctx context.Context, s *scope, since time.Time) ([]string, error) {
	list := &v1alpha1.MachineList{}
	if err := r.Client.List(ctx, list, client.InNamespace(s.tc.Namespace), client.MatchingLabels{v1alpha1.LabelTenantCluster: s.tc.Name}); err != nil {
		return nil, fmt.Errorf("listing the Machines of the tenant: %w", err)
	}
	var waiting []string
	for i := range list.Items {
		m := &list.Items[i]
		running, stale := bootedBefore(m, since)
		if !stale {
			continue
		}
		if running {
			waiting = append(waiting, m.Name)
		}
		if m.Status.LastBoot == nil || machinestate.RebootRequested(m) {
			continue
		}
		if err := r.requireReboot(ctx, m, since); err != nil {
			return nil, err
		}
	}
	slices.Sort(waiting)
	return waiting, nil
}

// requireReboot applies RebootRequired=True for the boot m reported, at
// the resourceVersion read (a Machine that moved on since is looked at
// again in the next pass).
func (r *Reconciler) requireReboot(ctx context.Context, m *v1alpha1.Machine, since time.Time) error {
	msg := v1alpha1.BootMessage(m.Status.LastBoot.BootID, fmt.Sprintf(
		"booted before %s, when the tenant's new cluster CA began to sign: the node trusts only the old CA", since.UTC().Format(time.RFC3339)))
	patch := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name}}
	patch.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionRebootRequired, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonClusterCARotation, Message: msg, LastTransitionTime: metav1.Now()}}
	if _, err := ssa.ApplyStatusAt(ctx, r.Client, CARotationFieldOwner, patch, m.ResourceVersion); err != nil {
		return fmt.Errorf("applying RebootRequired to Machine %s/%s: %w", m.Namespace, m.Name, err)
	}
	return nil
}

// waitingNodesMessage names the Machines a rotation waits for, the first
// few of them.
func waitingNodesMessage(ca desired.PKIRole, names []string) string {
	const shown = 5
	list := names
	if len(list) > shown {
		list = list[:shown]
	}
	more := ""
	if len(names) > shown {
		more = fmt.Sprintf(" and %d more", len(names)-shown)
	}
	return fmt.Sprintf("%s: waiting for the reboot of %d Machine(s) booted before the new CA signed (RebootRequired, through their pools' rollout): %s%s",
		ca, len(names), strings.Join(list, ", "), more)
}

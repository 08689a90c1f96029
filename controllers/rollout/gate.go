package rollout

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/rollout/plan"
	"github.com/kubefarm/kubefarm/internal/machinestate"
)

// gateImage reads the pool's BootImage, the rollout's target. A missing
// BootImage, or one kubefarm-pxe has not verified, holds every start back
// (sum.ImageProblem) but not the pass: updates in flight go on.
func (r *Reconciler) gateImage(ctx context.Context, s *scope) (bool, error) {
	img := &v1alpha1.BootImage{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Name: s.pool.Spec.BootImage}, img); {
	case apierrors.IsNotFound(err):
		s.sum.ImageReason = v1alpha1.ReasonImageNotFound
		s.sum.ImageProblem = fmt.Sprintf("BootImage %s does not exist", s.pool.Spec.BootImage)
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading BootImage %s: %w", s.pool.Spec.BootImage, err)
	}
	s.image = img
	s.target = *machinestate.Target(img)
	s.pool.Status.RolloutImage = s.target.DeepCopy()
	// kubefarm-pxe verifies an image's artifacts (--verify-images);
	// until it has, no machine is rebooted into it. Without the check
	// the condition never appears and nothing waits.
	if c := meta.FindStatusCondition(img.Status.Conditions, v1alpha1.ConditionArtifactsVerified); c != nil && c.Status != metav1.ConditionTrue {
		s.sum.ImageReason = v1alpha1.ReasonImageNotReady
		s.sum.ImageProblem = fmt.Sprintf("BootImage %s: kubefarm-pxe has not verified its artifacts (%s: %s)", img.Name, c.Reason, c.Message)
	}
	return false, nil
}

// listMachines reads the Machines the pool controls, by name. A pool
// without any has nothing more to do.
func (r *Reconciler) listMachines(ctx context.Context, s *scope) (bool, error) {
	pool := s.pool
	list := &v1alpha1.MachineList{}
	if err := r.Client.List(ctx, list, client.InNamespace(pool.Namespace), client.MatchingLabels{v1alpha1.LabelPool: pool.Name}); err != nil {
		return false, fmt.Errorf("listing the Machines of NodePool %s: %w", pool.Name, err)
	}
	for i := range list.Items {
		if metav1.IsControlledBy(&list.Items[i], pool) && list.Items[i].DeletionTimestamp.IsZero() {
			s.listed = append(s.listed, &list.Items[i])
		}
	}
	slices.SortFunc(s.listed, func(a, b *v1alpha1.Machine) int { return strings.Compare(a.Name, b.Name) })
	s.sum.Total = len(s.listed)
	return len(s.listed) == 0, nil
}

// readTenant reads the tenant's Nodes, one for each Machine's hostname
// (nil: none), and keeps the client the later phases cordon, evict and
// uncordon with.
func (r *Reconciler) readTenant(ctx context.Context, s *scope) (bool, error) {
	cs, nodes, err := r.tenantNodes(ctx, s.pool)
	if err != nil {
		return false, err
	}
	s.cs = cs
	for _, m := range s.listed {
		s.machines = append(s.machines, plan.Machine{M: m, Node: nodes[m.Spec.Hostname]})
	}
	return false, nil
}

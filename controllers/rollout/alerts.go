package rollout

import (
	"context"
	"errors"
	"fmt"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/rollout/plan"
	"github.com/kubefarm/kubefarm/internal/alertgate"
)

// AlertReader reads the firing alerts of the operator's alert sources
// (internal/alertgate.Sources).
type AlertReader interface {
	Firing(ctx context.Context, source string, f alertgate.Filter) ([]alertgate.Alert, error)
}

// maxAlertNames bounds the alert names a hold's message names.
const maxAlertNames = 5

// alertHold is the alert gate's verdict on the pool: nil when it holds
// nothing, a pool-wide hold while matching alerts fire or the source
// cannot be read. invalid is set when the gate itself cannot be evaluated
// (a bad pattern, an unknown source, no sources at all): the strategy is
// then invalid, as a bad window is.
func (r *Reconciler) alertHold(ctx context.Context, gate *v1alpha1.AlertGate) (hold *plan.Hold, invalid string) {
	f, err := alertgate.Compile(gate.Include, gate.Exclude)
	if err != nil {
		return nil, "spec.rollout.alertGate." + err.Error()
	}
	if r.Alerts == nil {
		return nil, fmt.Sprintf("spec.rollout.alertGate.source: %q: kubefarm-manager has no --alert-source", gate.Source)
	}
	firing, err := r.Alerts.Firing(ctx, gate.Source, f)
	switch {
	case errors.Is(err, alertgate.ErrUnknownSource):
		return nil, "spec.rollout.alertGate.source: " + err.Error()
	case err != nil:
		return &plan.Hold{Reason: v1alpha1.ReasonAlertsUnknown,
			Message: fmt.Sprintf("alert source %s could not be read, so no machine may start: %v", gate.Source, err)}, ""
	case len(firing) > 0:
		return &plan.Hold{Reason: v1alpha1.ReasonFiringAlerts,
			Message: fmt.Sprintf("%d alerts fire in %s: %s", len(firing), gate.Source, alertgate.Summary(firing, maxAlertNames))}, ""
	}
	return nil, ""
}

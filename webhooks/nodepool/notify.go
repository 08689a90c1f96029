package nodepool

import (
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/notify"
)

// validateNotify renders spec.rollout.notify.template against a sample
// message, so a template that would fail at every notification (a parse
// error, an unknown field) is refused when the pool is applied rather
// than counted as invalid during a rollout.
func validateNotify(pool *kubefarmv1.NodePool) field.ErrorList {
	n := pool.Spec.Rollout.Notify
	if n == nil {
		return nil
	}
	sample := notify.Message{Event: notify.EventDrainStarting, Namespace: pool.Namespace, Pool: pool.Name,
		Machine: pool.Name + "-m0", Node: "m0", Image: pool.Spec.BootImage, Detail: "sample", Time: time.Unix(0, 0).UTC()}
	if _, err := notify.Render(n.Template, sample); err != nil {
		return field.ErrorList{field.Invalid(field.NewPath("spec", "rollout", "notify", "template"), n.Template, err.Error())}
	}
	return nil
}

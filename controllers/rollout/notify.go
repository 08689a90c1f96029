package rollout

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/rollout/plan"
	"github.com/kubefarm/kubefarm/internal/notify"
)

// Notifier queues the rollout's notifications (internal/notify.Notifier);
// Send never blocks.
type Notifier interface {
	Send(url, template string, m notify.Message) error
}

// notifyURLKey is the key of the notification Secret that holds the URL.
const notifyURLKey = "url"

// notify sends event about m (nil: about the pool) when the pool asks for
// notifications. Nothing here fails the pass: a missing or unlabelled
// Secret, a bad URL or template, a full queue are a NotificationFailed
// Warning on the pool, naming what is wrong but never the URL.
func (r *Reconciler) notify(ctx context.Context, s *scope, event string, m *plan.Machine, detail string) {
	n := s.pool.Spec.Rollout.Notify
	if n == nil || r.Notifier == nil {
		return
	}
	msg := notify.Message{Event: event, Namespace: s.pool.Namespace, Pool: s.pool.Name, Detail: detail, Time: s.now.UTC()}
	if s.image != nil {
		msg.Image = s.image.Name
	}
	if m != nil {
		msg.Machine, msg.Node = m.M.Name, m.M.Spec.Hostname
	}
	url, err := r.notifyURL(ctx, s.pool.Namespace, n.URLSecret)
	if err == nil {
		err = r.Notifier.Send(url, n.Template, msg)
	}
	if err != nil {
		r.Recorder.Eventf(s.pool, nil, corev1.EventTypeWarning, "NotificationFailed", "Notify",
			"the %s notification was not sent: %v", event, err)
	}
}

// notifyHalt sends RolloutHalted once per halt: writeStatus calls it after
// a write of the pool's status, and it notifies when the pool is halted
// and this manager has not notified that halt yet. The pool's cached copy
// may lag its own last write, so "Halted was False before this pass" would
// notify one halt twice; the halts notified are remembered instead, and
// forgotten when the pool is no longer halted (a retry) or deleted. A new
// leader that finds a pool already halted writes nothing, so it does not
// post the old halt again.
func (r *Reconciler) notifyHalt(ctx context.Context, s *scope) {
	key := types.NamespacedName{Namespace: s.pool.Namespace, Name: s.pool.Name}
	halted := meta.FindStatusCondition(s.pool.Status.Conditions, v1alpha1.ConditionHalted)
	if halted == nil || halted.Status != metav1.ConditionTrue {
		r.haltsNotified.Delete(key)
		return
	}
	if _, done := r.haltsNotified.LoadOrStore(key, true); !done {
		r.notify(ctx, s, notify.EventRolloutHalted, nil, halted.Message)
	}
}

// notifyURL reads the URL from the pool's notification Secret, which must
// carry the kubefarm.io/notify-url=true label.
func (r *Reconciler) notifyURL(ctx context.Context, namespace, name string) (string, error) {
	reader := r.SecretReader
	if reader == nil {
		reader = r.Client
	}
	sec := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, sec); err != nil {
		return "", fmt.Errorf("spec.rollout.notify.urlSecret: reading Secret %s: %w", name, err)
	}
	if sec.Labels[v1alpha1.LabelNotifyURL] != "true" {
		return "", fmt.Errorf("spec.rollout.notify.urlSecret: Secret %s is not labelled %s=true", name, v1alpha1.LabelNotifyURL)
	}
	url := string(sec.Data[notifyURLKey])
	if url == "" {
		return "", fmt.Errorf("spec.rollout.notify.urlSecret: Secret %s has no %q key", name, notifyURLKey)
	}
	return url, nil
}

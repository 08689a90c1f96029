package imagecheck

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/conditions"
	"github.com/kubefarm/kubefarm/internal/ssa"
)

// kubefarm-pxe applies the BootImages' conditions (server-side apply of the
// status subresource). Reading them is httpboot's get/list/watch rule.
// +kubebuilder:rbac:groups=kubefarm.io,resources=bootimages/status,verbs=patch

// FieldOwner is the field manager of the conditions this controller writes.
const FieldOwner = "kubefarm-pxe"

// Name is the controller's name in logs.
const Name = "bootimage-artifacts"

// Defaults of Options.
const (
	DefaultConcurrency = 2
	DefaultBaseDelay   = 5 * time.Second
	DefaultMaxDelay    = 10 * time.Minute
)

// Store is what the controller needs of httpboot.Store.
type Store interface {
	// Ensure fetches the artifact into the cache, verifying its digest;
	// a cached digest costs nothing.
	Ensure(ctx context.Context, a kubefarmv1.Artifact, repository string) error
	// Size is the cached file's size.
	Size(digest string) (int64, error)
}

// Reconciler checks one BootImage.
type Reconciler struct {
	// Reader reads BootImages, the informer cache in kubefarm-pxe.
	Reader client.Reader
	// Client writes the status; it needs the scheme of the kubefarm API.
	Client client.Client
	// Store is the replica's artifact cache.
	Store Store
	// Recorder records an event for every change of a condition.
	Recorder events.EventRecorder
}

// Reconcile fetches the image's three artifacts into the cache, decides
// the conditions and applies them when they changed. A failed check is
// returned as an error, so the queue retries it with backoff (a URL can be
// fixed, a registry can come back).
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var bi kubefarmv1.BootImage
	if err := r.Reader.Get(ctx, req.NamespacedName, &bi); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	results := Fetch(ctx, r.Store, &bi)
	if err := ctx.Err(); err != nil {
		// Stopping: a wait cut short is no verdict on the image.
		return reconcile.Result{}, err
	}
	verified, ready := Decide(results)

	before := bi.Status.Conditions
	after := make([]metav1.Condition, len(before))
	copy(after, before)
	conditions.Set(&after, bi.Generation, verified)
	conditions.Set(&after, bi.Generation, ready)
	if !equality.Semantic.DeepEqual(before, after) {
		// Only the two conditions this controller owns are applied.
		st := &kubefarmv1.BootImage{ObjectMeta: metav1.ObjectMeta{Name: bi.Name}}
		for _, t := range []string{kubefarmv1.ConditionArtifactsVerified, kubefarmv1.ConditionReady} {
			st.Status.Conditions = append(st.Status.Conditions, *meta.FindStatusCondition(after, t))
		}
		if err := ssa.ApplyStatus(ctx, r.Client, FieldOwner, st); err != nil {
			return reconcile.Result{}, err
		}
		if r.Recorder != nil {
			conditions.EmitTransitions(r.Recorder, &bi, before, after, WarningReasons...)
		}
	}
	if verified.Status != metav1.ConditionTrue {
		return reconcile.Result{}, fmt.Errorf("BootImage %s: %s: %s", bi.Name, verified.Reason, verified.Message)
	}
	return reconcile.Result{}, nil
}

// Fetch ensures each artifact of bi in spec order (kernel, initrd, rootfs)
// and reports what became of it. One at a time: with the controller's
// bounded concurrency that bounds the replica's parallel downloads.
func Fetch(ctx context.Context, s Store, bi *kubefarmv1.BootImage) []Result {
	arts := []struct {
		name string
		a    kubefarmv1.Artifact
	}{{"kernel", bi.Spec.Kernel}, {"initrd", bi.Spec.Initrd}, {"rootfs", bi.Spec.Rootfs}}
	out := make([]Result, 0, len(arts))
	for _, x := range arts {
		res := Result{Name: x.name, Field: "spec." + x.name + ".url", Digest: x.a.Digest}
		if bi.Spec.Repository != "" {
			res.Field = "spec.repository"
		}
		if res.Err = s.Ensure(ctx, x.a, bi.Spec.Repository); res.Err == nil {
			res.Size, res.Err = s.Size(x.a.Digest)
		}
		out = append(out, res)
	}
	return out
}

// Options tune the controller.
type Options struct {
	// Concurrency is how many BootImages are checked at once, each one
	// artifact at a time (default DefaultConcurrency): downloads are big.
	Concurrency int
	// BaseDelay and MaxDelay bound the per-image exponential backoff of
	// failed checks (defaults DefaultBaseDelay, DefaultMaxDelay).
	BaseDelay, MaxDelay time.Duration
}

// New builds the controller over c, the informer cache. Start it once the
// cache runs; it returns when its context ends.
//
// It reacts to a BootImage's creation (and every BootImage when it starts)
// and to spec changes (none: the spec is immutable), not to status
// writes: each replica checks every image once per start, then retries only
// its own failures. Replicas that disagree (one cannot reach a registry)
// do not overwrite each other back and forth: the last verdict written
// stands until its writer's next retry.
func New(c cache.Cache, r *Reconciler, o Options, log logr.Logger) (controller.Controller, error) {
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.BaseDelay <= 0 {
		o.BaseDelay = DefaultBaseDelay
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = DefaultMaxDelay
	}
	skipNameValidation := true
	ctl, err := controller.NewUnmanaged(Name, controller.Options{
		Reconciler:              r,
		MaxConcurrentReconciles: o.Concurrency,
		RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](o.BaseDelay, o.MaxDelay),
		Logger:                  log,
		// Unmanaged, and its metrics are not served: the name need not
		// be unique in the process (tests build several).
		SkipNameValidation: &skipNameValidation,
	})
	if err != nil {
		return nil, err
	}
	err = ctl.Watch(source.Kind(c, &kubefarmv1.BootImage{},
		&handler.TypedEnqueueRequestForObject[*kubefarmv1.BootImage]{},
		predicate.TypedGenerationChangedPredicate[*kubefarmv1.BootImage]{}))
	if err != nil {
		return nil, err
	}
	return ctl, nil
}

// CoreRecorder adapts kubefarm-pxe's core/v1 event recorder (the RBAC it
// already has) to the events.k8s.io recorder interface of
// conditions.EmitTransitions. The action and related object are dropped:
// core/v1 events have neither.
func CoreRecorder(rec record.EventRecorder) events.EventRecorder { return coreRecorder{rec} }

type coreRecorder struct{ rec record.EventRecorder }

func (c coreRecorder) Eventf(regarding runtime.Object, _ runtime.Object, eventtype, reason, _, note string, args ...interface{}) {
	c.rec.Eventf(regarding, eventtype, reason, note, args...)
}

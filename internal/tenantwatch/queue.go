package tenantwatch

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Drain runs handle for every name the queue yields until the queue is shut
// down: the one worker of a tenant's watch. A failed name goes back with
// the queue's backoff, unless ctx is done (the watch is stopping and the
// failure is most likely that). what names the kind in the retry log line.
func Drain(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], what string,
	handle func(ctx context.Context, name string) error) {
	for next(ctx, queue, what, handle) {
	}
}

func next(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], what string,
	handle func(ctx context.Context, name string) error) bool {
	name, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(name)
	if err := handle(ctx, name); err != nil {
		if ctx.Err() == nil {
			log.FromContext(ctx).Error(err, "handling "+what+"; retrying", "name", name)
			queue.AddRateLimited(name)
		}
		return true
	}
	queue.Forget(name)
	return true
}

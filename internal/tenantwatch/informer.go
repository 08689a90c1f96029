package tenantwatch

import (
	"context"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/cache"
)

// LogWatchErrors makes informer say, once per failed try, why its watch of
// what (in the tenant) failed. The reflector retries with a backoff by
// itself; without this the only trace of an unreachable tenant is silence.
func LogWatchErrors(informer cache.SharedIndexInformer, logger logr.Logger, what string) error {
	return informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		logger.Info("watching the tenant's "+what+" failed; retrying", "error", err.Error())
	})
}

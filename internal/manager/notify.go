package manager

import (
	"context"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kubefarm/kubefarm/internal/fetchguard"
	"github.com/kubefarm/kubefarm/internal/notify"
)

// notifyResolveTimeout bounds the lookup of the API server's addresses,
// which the notifications' guard refuses.
const notifyResolveTimeout = 10 * time.Second

// newNotifier is the rollout's notification sender, registered with mgr
// (it runs on the leader). Its connections go through a fetch guard that
// refuses the admin cluster's API server besides the fixed classes and
// the operator's --notify-denied-cidrs.
func newNotifier(mgr ctrl.Manager, opts Options) (*notify.Notifier, error) {
	denied, err := fetchguard.ParsePrefixes("--notify-denied-cidrs", opts.NotifyDeniedCIDRs)
	if err != nil {
		return nil, err
	}
	allowed, err := fetchguard.ParsePrefixes("--notify-allowed-cidrs", opts.NotifyAllowedCIDRs)
	if err != nil {
		return nil, err
	}
	host := mgr.GetConfig().Host
	ctx, cancel := context.WithTimeout(context.Background(), notifyResolveTimeout)
	defer cancel()
	api, err := fetchguard.HostAddrs(ctx, nil, host)
	if err != nil {
		return nil, fmt.Errorf("resolving the API server %s for the notifications' guard: %w", host, err)
	}
	n, err := notify.New(notify.Options{
		Guard:      fetchguard.New(fetchguard.Options{Denied: denied, Allowed: allowed, APIServer: api}),
		Registerer: crmetrics.Registry,
	})
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(n); err != nil {
		return nil, fmt.Errorf("registering the rollout's notifier: %w", err)
	}
	return n, nil
}

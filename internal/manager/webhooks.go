package manager

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/webhooks/nodepool"
	tcwebhook "github.com/kubefarm/kubefarm/webhooks/tenantcluster"
)

// setupWebhooks registers every admission webhook and the cache indexes they read.
func setupWebhooks(mgr ctrl.Manager) error {
	if err := nodepool.SetupIndexes(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &kubefarmv1.NodePool{}).
		WithValidator(&nodepool.AddressValidator{Reader: mgr.GetCache()}).
		Complete(); err != nil {
		return fmt.Errorf("registering the NodePool webhook: %w", err)
	}
	if err := (&tcwebhook.VersionValidator{
		MinVersion: tcwebhook.DefaultMinVersion, MaxVersion: tcwebhook.DefaultMaxVersion,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("registering the TenantCluster webhook: %w", err)
	}
	return nil
}

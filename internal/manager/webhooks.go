package manager

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/webhooks/machine"
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
	// The claims are read from the API server, not the cache: a claim made
	// a moment before its Machine must count (webhooks/machine).
	if err := ctrl.NewWebhookManagedBy(mgr, &kubefarmv1.Machine{}).
		WithValidator(&machine.ClaimValidator{Reader: mgr.GetAPIReader()}).
		Complete(); err != nil {
		return fmt.Errorf("registering the Machine webhook: %w", err)
	}
	if err := (&tcwebhook.VersionValidator{
		MinVersion: tcwebhook.DefaultMinVersion, MaxVersion: tcwebhook.DefaultMaxVersion,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("registering the TenantCluster webhook: %w", err)
	}
	return nil
}

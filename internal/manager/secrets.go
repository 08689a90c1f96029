package manager

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
)

// Which Secrets the manager keeps in memory. Its informer cache would
// otherwise hold every Secret of the admin cluster, data and all (service
// account tokens, Helm releases, other operators' credentials), because
// the TenantCluster controller watches Secrets. It holds only the ones
// kubefarm makes, which all carry both labels of OwnedSecrets:
//
//   - the admin kubeconfigs (tenantcluster.kubeconfigSecret) and the token
//     issuer credentials in kubefarm-pxe's namespace;
//   - the encryption key and configuration (desired.NewEncryptionKeySecret,
//     desired.EncryptionConfigSecret);
//   - the PKI, written by cert-manager with the labels of each
//     Certificate's spec.secretTemplate (desired.Certificates), the etcd
//     backup client's and a rotated CA's later generations among them,
//     and a rotated CA's trust Secret (desired.TrustSecret);
//   - the backup key kubefarm makes when backups name none
//     (desired.NewEtcdBackupKeySecret).
//
// The Secrets it reads that are not kubefarm's are the two a TenantCluster's
// backups may name, the operator's (the S3 credentials and the backup key's
// recipients): the controller reads them from the API server (APIReader),
// and their events come from SecretEvents, a second cache of every Secret's
// name and nothing else.

// OwnedSecrets selects the Secrets kubefarm makes: managed by kubefarm, of a
// TenantCluster. Selecting on both keeps other tools' Secrets that happen to
// say managed-by=kubefarm, or to name a tenant, out of memory.
func OwnedSecrets() labels.Selector {
	managed, err := labels.NewRequirement(desired.LabelManagedBy, selection.Equals, []string{"kubefarm"})
	if err != nil {
		panic(err) // constant arguments
	}
	tenant, err := labels.NewRequirement(v1alpha1.LabelTenantCluster, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*managed, *tenant)
}

// secretCache restricts the manager's cache of Secrets to OwnedSecrets
// (cacheAll: every Secret, as before; for the memory benchmark only).
func secretCache(cacheAll bool) cache.Options {
	if cacheAll {
		return cache.Options{}
	}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.Secret{}: {Label: OwnedSecrets()}}}
}

// newSecretEvents is a cache for watching Secrets by name alone: used with
// a metav1.PartialObjectMetadata of kind Secret, its informer lists and
// watches only metadata, and keepIdentity drops all of it before it is
// stored but namespace, name, UID and resourceVersion (annotations can be
// large: kubectl's last-applied-configuration holds the whole Secret,
// data included). It is apart from the manager's cache because a cache's
// options are per kind: the manager's selects Secrets by label, and this
// one must see every Secret.
func newSecretEvents(cfg *rest.Config, mgr ctrl.Manager) (cache.Cache, error) {
	c, err := cache.New(cfg, cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient(),
		DefaultTransform: keepIdentity,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the cache of Secret names: %w", err)
	}
	// A runnable with GetCache is started and synced with the manager's
	// caches, before any controller.
	if err := mgr.Add(cacheRunnable{c}); err != nil {
		return nil, err
	}
	return c, nil
}

// keepIdentity keeps of an object's metadata only what names it.
func keepIdentity(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Namespace: m.Namespace, Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion,
	}}, nil
}

type cacheRunnable struct{ cache.Cache }

func (c cacheRunnable) GetCache() cache.Cache { return c.Cache }

// Start runs the cache until ctx is done.
func (c cacheRunnable) Start(ctx context.Context) error { return c.Cache.Start(ctx) }

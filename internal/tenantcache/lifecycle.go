package tenantcache

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/tenantcache/credential"
)

// +kubebuilder:rbac:groups=kubefarm.io,resources=tenantclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch

// SetupWithManager registers the cache (which stops every connection with
// the manager) and its lifecycle controller, "tenantcache", once however
// many consumers call it. The credential Secrets are mapped to their
// TenantCluster by name; the manager already caches Secrets for the
// TenantCluster controller, so this costs no informer of its own.
func (c *Cache) SetupWithManager(mgr ctrl.Manager) error {
	c.setupOnce.Do(func() {
		if c.setupErr = IndexMachines(context.Background(), mgr.GetFieldIndexer()); c.setupErr != nil {
			return
		}
		if c.setupErr = mgr.Add(c); c.setupErr != nil {
			return
		}
		suffix := c.opts.KubeconfigSecret("")
		kubeconfig := predicate.NewPredicateFuncs(func(o client.Object) bool {
			return strings.HasSuffix(o.GetName(), suffix)
		})
		c.setupErr = ctrl.NewControllerManagedBy(mgr).
			For(&kubefarmv1.TenantCluster{}).
			Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(c.TenantOfKubeconfig), builder.WithPredicates(kubeconfig)).
			Named("tenantcache").
			Complete(reconcile.Func(c.reconcile))
	})
	return c.setupErr
}

// TenantOfKubeconfig maps a credential Secret to its TenantCluster.
func (c *Cache) TenantOfKubeconfig(_ context.Context, o client.Object) []reconcile.Request {
	name, ok := strings.CutSuffix(o.GetName(), c.opts.KubeconfigSecret(""))
	if !ok || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// reconcile makes the tenant's connection match its credential: none
// without a live TenantCluster and a usable credential, else one running
// with the credential the Secret holds now.
func (c *Cache) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	tc, cfg, err := c.credential(ctx, req.NamespacedName)
	if err != nil || tc == nil {
		if c.stop(req.NamespacedName) {
			why := "the TenantCluster is gone or being deleted"
			if err != nil {
				why = err.Error()
			}
			logger.Info("disconnected from the tenant", "why", why)
		}
		if apierrors.IsNotFound(err) || err == nil || errUnusable(err) {
			// The Secret's next change brings the next pass.
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	_, started, err := c.ensure(tc, cfg)
	if err != nil {
		return ctrl.Result{}, err
	}
	if started {
		logger.Info("connected to the tenant", "server", cfg.Host)
	}
	return ctrl.Result{}, nil
}

// unusableError: the credential Secret is there but holds nothing usable;
// retrying cannot help.
type unusableError struct{ error }

func errUnusable(err error) bool {
	_, ok := err.(unusableError)
	return ok
}

// credential is the live TenantCluster key and the REST config of its
// credential Secret; a nil TenantCluster when it is gone or being deleted.
// Errors name the TenantCluster and the Secret.
func (c *Cache) credential(ctx context.Context, key types.NamespacedName) (*kubefarmv1.TenantCluster, *rest.Config, error) {
	tc := &kubefarmv1.TenantCluster{}
	switch err := c.reader.Get(ctx, key, tc); {
	case apierrors.IsNotFound(err):
		return nil, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("reading TenantCluster %s: %w", key, err)
	}
	if !tc.DeletionTimestamp.IsZero() {
		return nil, nil, nil
	}
	secret := &corev1.Secret{}
	name := c.opts.KubeconfigSecret(tc.Name)
	if err := c.reader.Get(ctx, client.ObjectKey{Namespace: tc.Namespace, Name: name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("TenantCluster %s has no credential yet: %w", key, err)
		}
		return nil, nil, fmt.Errorf("reading the credential Secret %s/%s of TenantCluster %s: %w", tc.Namespace, name, key, err)
	}
	cfg, err := credential.RESTConfig(secret.Data[c.opts.KubeconfigKey], c.opts.UserAgent)
	if err != nil {
		return nil, nil, unusableError{fmt.Errorf("the credential Secret %s/%s of TenantCluster %s, key %q: %w",
			tc.Namespace, name, key, c.opts.KubeconfigKey, err)}
	}
	return tc, cfg, nil
}

// Package jointoken issues the per-machine join token /config hands to a
// booting machine (ARCHITECTURE.md, boot step 3): a bootstrap token in the
// machine's tenant cluster, made for that machine alone and short-lived.
//
// kubefarm-pxe never sees a tenant's PKI. kubefarm-manager writes, per
// TenantCluster, a kubeconfig of the tenant user kubefarm:token-issuer into
// a Secret in kubefarm-pxe's own namespace (labelled
// kubefarm.io/credential=token-issuer); in the tenant that user may only
// create Secrets in kube-system (a Role with create alone), and an
// admission policy admits only kubefarm's bootstrap tokens among them; it
// cannot read, list or delete any Secret. kubefarm-pxe reads the
// credential Secrets through a cache restricted to its namespace and that
// label, so its admin-cluster RBAC is a namespaced Role: get, list and
// watch on Secrets of its own namespace.
//
// The token is a credential: it is returned to the caller and never logged
// or put in an error.
package jointoken

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
	"github.com/kubefarm/kubefarm/internal/restconfig"
)

// DefaultTTL is how long a join token is valid: from /config to the
// kubelet's first CSR is one boot of the rootfs, minutes. A token the node
// never used expires soon after, whatever happened to the machine.
const DefaultTTL = 15 * time.Minute

// TenantTimeout bounds every request to a tenant API server, so an
// unreachable tenant fails /config (which the agent retries) instead of
// holding it.
const TenantTimeout = 10 * time.Second

// ErrNoCredential is wrapped by Issue's error when the machine's tenant has
// no token issuer credential (yet): the TenantCluster is not ready, is in
// another installation, or kubefarm-manager runs with another
// --pxe-namespace.
var ErrNoCredential = errors.New("no token issuer credential")

// The credentials are read in kubefarm-pxe's own namespace only: a Role.
// The marker's namespace is the manager's --pxe-namespace default; the chart
// takes the rules and binds them in the release namespace.
// +kubebuilder:rbac:groups="",namespace=kubefarm-system,resources=secrets,verbs=get;list;watch

// CacheOptions restricts a controller-runtime cache's Secrets to namespace
// and the token issuer credentials in it: merge it into the cache's
// options. Only these Secrets are ever listed, watched or held in memory,
// and the RBAC it needs is get, list and watch on Secrets of namespace.
func CacheOptions(namespace string, opts cache.Options) cache.Options {
	if opts.ByObject == nil {
		opts.ByObject = map[client.Object]cache.ByObject{}
	}
	opts.ByObject[&corev1.Secret{}] = cache.ByObject{
		Namespaces: map[string]cache.Config{namespace: {}},
		Label:      labels.SelectorFromSet(labels.Set{kubefarmv1.LabelCredential: bootstraptoken.CredentialTokenIssuer}),
	}
	return opts
}

// Config configures an Issuer.
type Config struct {
	// Reader reads the credential Secrets: a cache built with CacheOptions
	// (a fake client in unit tests).
	Reader client.Reader
	// Namespace is kubefarm-pxe's namespace, where the credentials are.
	Namespace string
	// TTL of the issued tokens; zero means DefaultTTL. At most
	// bootstraptoken.MaxTTL.
	TTL time.Duration
	// NewClient makes a tenant client from a credential's kubeconfig; nil
	// is client.New. Tests replace it.
	NewClient func(*rest.Config) (client.Client, error)
}

// Issuer implements httpboot.JoinTokens.
type Issuer struct {
	cfg Config

	// clients holds one tenant client per TenantCluster, kept while its
	// credential carries the same address and certificate (the manager's
	// tenant clients use the same store): a renewed certificate or a moved
	// endpoint builds a new client at the next Issue; otherwise
	// connections are reused.
	clients *restconfig.Cache[types.NamespacedName, client.Client]
}

// New checks cfg and makes an Issuer.
func New(cfg Config) (*Issuer, error) {
	if cfg.Reader == nil {
		return nil, errors.New("join tokens: no reader for the credential Secrets")
	}
	if cfg.Namespace == "" {
		return nil, errors.New("join tokens: the namespace of the credential Secrets (kubefarm-pxe's own) is required")
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < 0 || cfg.TTL > bootstraptoken.MaxTTL {
		return nil, fmt.Errorf("join tokens: ttl %s must be more than 0 and at most %s", cfg.TTL, bootstraptoken.MaxTTL)
	}
	if cfg.NewClient == nil {
		cfg.NewClient = func(c *rest.Config) (client.Client, error) { return client.New(c, client.Options{}) }
	}
	return &Issuer{cfg: cfg, clients: restconfig.NewCache[types.NamespacedName](cfg.NewClient)}, nil
}

// Issue creates a bootstrap token for m in the tenant cluster m belongs to
// (spec.cluster, in m's namespace) and returns its value, id.secret.
func (i *Issuer) Issue(ctx context.Context, m *kubefarmv1.Machine) (string, error) {
	if m == nil || m.Spec.Cluster == "" {
		return "", errors.New("join token: the machine names no TenantCluster (spec.cluster)")
	}
	tenant := types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.Cluster}
	c, err := i.tenantClient(ctx, tenant)
	if err != nil {
		return "", err
	}
	tok, err := bootstraptoken.Issue(ctx, c, bootstraptoken.Options{
		Machine:     m.Name,
		TTL:         i.cfg.TTL,
		Description: fmt.Sprintf("kubefarm join token for Machine %s/%s", m.Namespace, m.Name),
	})
	if err != nil {
		// bootstraptoken's errors name the token's id, never its secret.
		return "", fmt.Errorf("join token for machine %s/%s in TenantCluster %s: %w", m.Namespace, m.Name, tenant, err)
	}
	return tok.Value(), nil
}

// Facts returns the NodeFacts kubefarm-manager published for m's tenant
// beside the credential: what m's agent needs to reach the tenant. An error
// until they are there (the tenant's endpoint is not known yet): /config
// answers 503 and the agent retries.
func (i *Issuer) Facts(ctx context.Context, m *kubefarmv1.Machine) (bootstraptoken.NodeFacts, error) {
	var f bootstraptoken.NodeFacts
	if m == nil || m.Spec.Cluster == "" {
		return f, errors.New("tenant facts: the machine names no TenantCluster (spec.cluster)")
	}
	tenant := types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.Cluster}
	s, key, err := i.credential(ctx, tenant)
	if err != nil {
		return f, err
	}
	data, ok := s.Data[bootstraptoken.KeyNodeFacts]
	if !ok {
		return f, fmt.Errorf("%w for TenantCluster %s: Secret %s has no %q yet (the tenant's endpoint is not known)",
			ErrNoCredential, tenant, key, bootstraptoken.KeyNodeFacts)
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return f, fmt.Errorf("tenant facts %q in Secret %s of TenantCluster %s do not parse: %w", bootstraptoken.KeyNodeFacts, key, tenant, err)
	}
	if f.APIServer == "" || len(f.CACert) == 0 {
		return f, fmt.Errorf("tenant facts in Secret %s of TenantCluster %s name no API server or CA", key, tenant)
	}
	return f, nil
}

// credential reads the token issuer credential Secret of tenant from the
// cache, checking that it is labelled for that tenant.
func (i *Issuer) credential(ctx context.Context, tenant types.NamespacedName) (*corev1.Secret, types.NamespacedName, error) {
	key := types.NamespacedName{Namespace: i.cfg.Namespace, Name: bootstraptoken.CredentialSecretName(tenant.Namespace, tenant.Name)}
	s := &corev1.Secret{}
	if err := i.cfg.Reader.Get(ctx, key, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, key, fmt.Errorf("%w for TenantCluster %s: Secret %s not found (is the TenantCluster ready, and kubefarm-manager's --pxe-namespace %s?)",
				ErrNoCredential, tenant, key, i.cfg.Namespace)
		}
		return nil, key, fmt.Errorf("reading the token issuer credential %s of TenantCluster %s: %w", key, tenant, err)
	}
	// The name is derived from the tenant, and the labels say whose it is;
	// they must agree, or a Secret someone else wrote under that name could
	// send one tenant's machines to another tenant.
	if s.Labels[kubefarmv1.LabelTenantNamespace] != tenant.Namespace || s.Labels[kubefarmv1.LabelTenantCluster] != tenant.Name {
		return nil, key, fmt.Errorf("token issuer credential %s is labelled for TenantCluster %s/%s, not %s",
			key, s.Labels[kubefarmv1.LabelTenantNamespace], s.Labels[kubefarmv1.LabelTenantCluster], tenant)
	}
	return s, key, nil
}

// tenantClient returns the client of tenant, built anew when its credential
// changed since the last call.
func (i *Issuer) tenantClient(ctx context.Context, tenant types.NamespacedName) (client.Client, error) {
	s, key, err := i.credential(ctx, tenant)
	if err != nil {
		i.forget(tenant)
		return nil, err
	}
	data := s.Data[bootstraptoken.KeyKubeconfig]
	if len(data) == 0 {
		return nil, fmt.Errorf("token issuer credential %s of TenantCluster %s has no %q key", key, tenant, bootstraptoken.KeyKubeconfig)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		// The parser's message may quote the file; the file holds a key.
		return nil, fmt.Errorf("token issuer credential %s of TenantCluster %s: the kubeconfig does not parse", key, tenant)
	}
	cfg.Timeout = TenantTimeout
	cfg.UserAgent = "kubefarm-pxe"
	c, err := i.clients.Get(tenant, cfg)
	if err != nil {
		return nil, fmt.Errorf("client of TenantCluster %s: %w", tenant, err)
	}
	return c, nil
}

// forget drops the client of a tenant whose credential is gone, so a
// deleted TenantCluster's client (and its connections) does not linger.
func (i *Issuer) forget(tenant types.NamespacedName) { i.clients.Forget(tenant) }

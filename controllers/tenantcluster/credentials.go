package tenantcluster

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
)

// The credentials the controller writes from the tenant's PKI: the admin
// kubeconfigs beside the TenantCluster, and the token issuer's kubeconfig
// in kubefarm-pxe's namespace. The PKI itself is cert-manager's; these are
// only read from its Secrets.

// AdminKubeconfigKey is the key of the kubeconfig in the admin kubeconfig
// Secrets.
const AdminKubeconfigKey = "kubeconfig"

// AdminKubeconfigSecretName names the Secret with the admin kubeconfig for
// people: embedded credentials, the external endpoint.
func AdminKubeconfigSecretName(cluster string) string { return cluster + "-admin-kubeconfig" }

// InternalAdminKubeconfigSecretName names the admin kubeconfig that points
// at the API server Service's in-cluster name, for tools running in the
// admin cluster, which may not be able to reach the external address. (The
// controller itself reaches the tenant as the super-admin, see
// tenantRESTConfig, not through this Secret.)
func InternalAdminKubeconfigSecretName(cluster string) string {
	return cluster + "-admin-kubeconfig-internal"
}

// readSecrets reads the Secret of every Certificate the pass applied, for
// the checksums and the kubeconfigs; missing names the ones not there yet.
func (r *Reconciler) readSecrets(ctx context.Context, s *scope) (desired.SecretData, []string, error) {
	c := s.cluster
	data := desired.SecretData{}
	var missing []string
	for _, cert := range s.certificates {
		secret := &corev1.Secret{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: cert.Spec.SecretName}, secret)
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, cert.Spec.SecretName)
		case err != nil:
			return nil, nil, err
		default:
			data[secret.Name] = secret.Data
		}
	}
	return data, missing, nil
}

// applyKubeconfigs writes the admin kubeconfigs. The external one waits for
// the endpoint: a kubeconfig with an address clients cannot use is worse
// than none, and status.adminKubeconfigSecret tells when it is there.
func (r *Reconciler) applyKubeconfigs(ctx context.Context, s *scope) error {
	tc, c, endpoint, secrets := s.tc, s.cluster, s.endpoint, s.secrets
	admin := secrets[c.SecretName(desired.RoleAdmin)]
	ca, crt, key := c.TrustPEM(desired.RoleCA, secrets), admin["tls.crt"], admin["tls.key"]
	internal, err := desired.AdminKubeconfig(c, false, ca, crt, key)
	if err != nil {
		return err
	}
	if err := r.apply(ctx, tc, r.kubeconfigSecret(c, InternalAdminKubeconfigSecretName(c.Name), internal), nil); err != nil {
		return err
	}
	if err := r.applyTokenIssuerCredential(ctx, c, secrets, endpoint); err != nil {
		return err
	}
	if endpoint == "" {
		return nil
	}
	// Built from the endpoint rather than desired.AdminKubeconfig(c, true, ...):
	// for NodePort the port clients use is the node port, not the
	// Service port the builder knows.
	external, err := desired.Kubeconfig(c.Name, endpoint, desired.UserAdmin, desired.ClientCredentials{CAData: ca, CertData: crt, KeyData: key})
	if err != nil {
		return err
	}
	name := AdminKubeconfigSecretName(c.Name)
	if err := r.apply(ctx, tc, r.kubeconfigSecret(c, name, external), nil); err != nil {
		return err
	}
	tc.Status.AdminKubeconfigSecret = name
	return nil
}

func (r *Reconciler) kubeconfigSecret(c *desired.Cluster, name string, kubeconfig []byte) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: map[string]string{
			v1alpha1.LabelTenantCluster: c.Name,
			desired.LabelManagedBy:      "kubefarm",
		}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{AdminKubeconfigKey: kubeconfig},
	}
}

// applyTokenIssuerCredential writes the token issuer's kubeconfig into
// PXENamespace. It points at the in-cluster endpoint, like the internal
// admin kubeconfig: kubefarm-pxe runs in the admin cluster and need not
// reach the external address. The Secret is in another namespace than the
// TenantCluster, so it can have no owner reference; reconcileDelete
// deletes it.
func (r *Reconciler) applyTokenIssuerCredential(ctx context.Context, c *desired.Cluster, secrets desired.SecretData, endpoint string) error {
	if r.PXENamespace == "" {
		return nil
	}
	s := secrets[c.SecretName(desired.RoleTokenIssuer)]
	kubeconfig, err := desired.Kubeconfig(c.Name, c.InClusterEndpoint(), desired.UserTokenIssuer,
		desired.ClientCredentials{CAData: c.TrustPEM(desired.RoleCA, secrets), CertData: s["tls.crt"], KeyData: s["tls.key"]})
	if err != nil {
		return err
	}
	labels := bootstraptoken.CredentialLabels(c.Namespace, c.Name)
	labels[desired.LabelManagedBy] = "kubefarm"
	secret := &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name: bootstraptoken.CredentialSecretName(c.Namespace, c.Name), Namespace: r.PXENamespace, Labels: labels,
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{bootstraptoken.KeyKubeconfig: kubeconfig},
	}
	if endpoint != "" {
		// Until the endpoint is known there is nothing a node could
		// join, and kubefarm-pxe answers /config with 503.
		facts, err := json.Marshal(nodeFacts(c, endpoint, c.TrustPEM(desired.RoleCA, secrets)))
		if err != nil {
			return err
		}
		secret.Data[bootstraptoken.KeyNodeFacts] = facts
	}
	err = r.applyUnowned(ctx, secret, nil)
	if apierrors.IsNotFound(err) {
		// The namespace does not exist: kubefarm-pxe is not installed
		// there. The tenant's control plane does not depend on it, so this
		// is no reason to hold the TenantCluster back; the next pass
		// writes the credential once the namespace is there.
		log.FromContext(ctx).Info("not writing the token issuer credential: the PXE namespace does not exist", "namespace", r.PXENamespace)
		return nil
	}
	return err
}

// deleteTokenIssuerCredential deletes the credential written by
// applyTokenIssuerCredential. It is deleted whatever the volumeReclaimPolicy:
// it grants access to a tenant that is going away, and a TenantCluster
// recreated on retained PKI writes it again.
func (r *Reconciler) deleteTokenIssuerCredential(ctx context.Context, tc *v1alpha1.TenantCluster) error {
	if r.PXENamespace == "" {
		return nil
	}
	s := &corev1.Secret{}
	s.Namespace, s.Name = r.PXENamespace, bootstraptoken.CredentialSecretName(tc.Namespace, tc.Name)
	if err := r.Client.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the token issuer credential %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// nodeFacts are the tenant as its nodes see it: the external endpoint (the
// one people use too: nodes boot outside the admin cluster), the tenant CA,
// the DNS Service address and domain, and the pod network.
func nodeFacts(c *desired.Cluster, endpoint string, ca []byte) bootstraptoken.NodeFacts {
	f := bootstraptoken.NodeFacts{APIServer: endpoint, CACert: ca, ClusterDomain: c.ClusterDomain}
	if c.DNSServiceIP.IsValid() {
		f.ClusterDNS = []string{c.DNSServiceIP.String()}
	}
	if c.PodCIDR.IsValid() {
		f.PodCIDR = c.PodCIDR.String()
	}
	return f
}

package manager

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
)

func TestOwnedSecrets(t *testing.T) {
	withManaged := func(l map[string]string) map[string]string { l[desired.LabelManagedBy] = "kubefarm"; return l }
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   bool
	}{
		// The labels each kind of kubefarm Secret carries.
		{"token issuer credential", withManaged(bootstraptoken.CredentialLabels("ns", "c1")), true},
		{"admin kubeconfig", map[string]string{v1alpha1.LabelTenantCluster: "c1", desired.LabelManagedBy: "kubefarm"}, true},
		{"PKI (cert-manager, secretTemplate)", desired.Certificates(testCluster(t))[0].Spec.SecretTemplate.Labels, true},
		{"unlabelled", nil, false},
		{"a Helm release", map[string]string{"owner": "helm", "name": "x"}, false},
		{"managed-by kubefarm, no tenant", map[string]string{desired.LabelManagedBy: "kubefarm"}, false},
		{"a tenant, managed by another", map[string]string{v1alpha1.LabelTenantCluster: "c1", desired.LabelManagedBy: "Helm"}, false},
	} {
		if got := OwnedSecrets().Matches(labels.Set(tc.labels)); got != tc.want {
			t.Errorf("%s (%v): %t, want %t", tc.name, tc.labels, got, tc.want)
		}
	}
	// Every Secret cert-manager writes for a tenant: CAs and leaves.
	for _, cert := range desired.Certificates(testCluster(t)) {
		if cert.Spec.SecretTemplate == nil || !OwnedSecrets().Matches(labels.Set(cert.Spec.SecretTemplate.Labels)) {
			t.Errorf("Certificate %s: its Secret's labels %v are not selected", cert.Name, cert.Spec.SecretTemplate)
		}
	}
}

// testCluster is a TenantCluster as the builders see it, enough for its
// Certificates.
func testCluster(t *testing.T) *desired.Cluster {
	t.Helper()
	tc := &v1alpha1.TenantCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha", Namespace: "tenants"},
		Spec: v1alpha1.TenantClusterSpec{Version: "v1.34.4"}}
	c, err := desired.Resolve(tc, desired.Options{Images: desired.Images{Registry: "registry.k8s.io", EtcdTag: "3.6.5-0", KonnectivityTag: "v0.34.0"}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestKeepIdentity(t *testing.T) {
	in := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s3", UID: "u1", ResourceVersion: "7",
			Labels:          map[string]string{"a": "b"},
			Annotations:     map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"secretAccessKey":"c2VjcmV0"}}`},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
			OwnerReferences: []metav1.OwnerReference{{Name: "x"}}, Finalizers: []string{"f"}},
	}
	got, err := keepIdentity(in)
	if err != nil {
		t.Fatal(err)
	}
	want := &metav1.PartialObjectMetadata{TypeMeta: in.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s3", UID: "u1", ResourceVersion: "7"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("keepIdentity = %+v, want %+v", got, want)
	}
	// Anything else passes through.
	other := &metav1.Status{Message: "m"}
	if got, _ := keepIdentity(other); got != any(other) {
		t.Errorf("keepIdentity changed a %T", other)
	}
}

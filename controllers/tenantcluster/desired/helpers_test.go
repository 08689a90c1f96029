package desired

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func testOptions() Options {
	return Options{Images: Images{Registry: "registry.example.com/k8s", EtcdTag: "3.6.5-0", KonnectivityTag: "v0.34.0"}}
}

// newTC is a TenantCluster as a user would write it: nothing defaulted.
func newTC(mods ...func(*v1alpha1.TenantCluster)) *v1alpha1.TenantCluster {
	tc := &v1alpha1.TenantCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "alpha", Namespace: "tenants"},
		Spec:       v1alpha1.TenantClusterSpec{Version: "v1.34.4"},
	}
	for _, m := range mods {
		m(tc)
	}
	return tc
}

func mustResolve(t *testing.T, tc *v1alpha1.TenantCluster, opts Options) *Cluster {
	t.Helper()
	c, err := Resolve(tc, opts)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	return c
}

func resolveTC(t *testing.T, mods ...func(*v1alpha1.TenantCluster)) *Cluster {
	t.Helper()
	return mustResolve(t, newTC(mods...), testOptions())
}

// mustConfigMap is the control plane ConfigMap the workload builders take.
func mustConfigMap(t *testing.T, c *Cluster) *corev1.ConfigMap {
	t.Helper()
	cm, err := ConfigMap(c)
	if err != nil {
		t.Fatalf("ConfigMap: %v", err)
	}
	return cm
}

func konnectivity(on bool) func(*v1alpha1.TenantCluster) {
	return func(tc *v1alpha1.TenantCluster) { tc.Spec.Konnectivity.Enabled = &on }
}

var yamlSerializer = json.NewSerializerWithOptions(json.DefaultMetaFactory, nil, nil, json.SerializerOptions{Yaml: true})

func toYAML(t *testing.T, objs ...runtime.Object) []byte {
	t.Helper()
	var buf bytes.Buffer
	for _, o := range objs {
		buf.WriteString("---\n")
		if err := yamlSerializer.Encode(o, &buf); err != nil {
			t.Fatalf("encode %T: %v", o, err)
		}
	}
	return buf.Bytes()
}

// flagMap parses "--k=v" flags, failing on anything else or a repeated key.
func flagMap(t *testing.T, flags []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, f := range flags {
		k, v, ok := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		if !strings.HasPrefix(f, "--") || !ok {
			t.Fatalf("flag %q is not --key=value", f)
		}
		if _, dup := m[k]; dup {
			t.Fatalf("flag --%s repeated", k)
		}
		m[k] = v
	}
	return m
}

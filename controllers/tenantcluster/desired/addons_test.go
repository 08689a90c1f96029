package desired

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
)

const testCAPEM = "-----BEGIN CERTIFICATE-----\nMIIBfakeCAcert00\n-----END CERTIFICATE-----\n"

// allAddons is every switch on, with a known endpoint and CA.
func allAddons() AddonInputs {
	return AddonInputs{
		Endpoint:        "https://10.0.0.5:31443",
		CACert:          []byte(testCAPEM),
		CoreDNS:         true,
		ProbeHostPolicy: true,
	}
}

// addonCluster is the test cluster with a CoreDNS tag, which testOptions
// (shared with the control plane tests) does not set.
func addonCluster(t *testing.T, mods ...func(*v1alpha1.TenantCluster)) *Cluster {
	t.Helper()
	c := resolveTC(t, mods...)
	c.Images.CoreDNSTag = "v1.12.1"
	return c
}

func mustAddons(t *testing.T, c *Cluster, in AddonInputs) []client.Object {
	t.Helper()
	objs, err := Addons(c, in)
	if err != nil {
		t.Fatalf("Addons: %v", err)
	}
	return objs
}

// findAddon returns the object named "Kind namespace/name" (see ObjectName).
func findAddon[T client.Object](t *testing.T, objs []client.Object, name string) T {
	t.Helper()
	for _, o := range objs {
		if ObjectName(o) == name {
			v, ok := o.(T)
			if !ok {
				t.Fatalf("%s is a %T", name, o)
			}
			return v
		}
	}
	t.Fatalf("%s not built; have %v", name, names(objs))
	var zero T
	return zero
}

func names(objs []client.Object) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, ObjectName(o))
	}
	return out
}

var (
	namesBase = []string{
		"Namespace kube-system",
		"ClusterRole kubefarm:node-network",
		"ClusterRoleBinding kubefarm:kubelet-bootstrap",
		"ClusterRoleBinding kubefarm:node-autoapprove-certificate-rotation",
		"ClusterRoleBinding kubefarm:node-network",
		"Role kube-public/kubefarm:bootstrap-signer-clusterinfo",
		"Role kube-system/kubefarm:kubelet-config",
		"Role kube-system/kubefarm:token-issuer",
		"RoleBinding kube-public/kubefarm:bootstrap-signer-clusterinfo",
		"RoleBinding kube-system/kubefarm:kubelet-config",
		"RoleBinding kube-system/kubefarm:token-issuer",
		"ConfigMap kube-public/cluster-info",
		"ConfigMap kube-system/kubelet-config",
		"ValidatingAdmissionPolicy " + TokenIssuerPolicyName,
		"ValidatingAdmissionPolicyBinding " + TokenIssuerPolicyName,
	}
	namesKonnectivity = []string{"ServiceAccount kube-system/konnectivity-agent", "DaemonSet kube-system/konnectivity-agent"}
	namesKubeProxy    = []string{
		"ClusterRoleBinding kubefarm:node-proxier", "ServiceAccount kube-system/kube-proxy",
		"ConfigMap kube-system/kube-proxy", "DaemonSet kube-system/kube-proxy",
	}
	namesCoreDNS = []string{
		"ClusterRole kubefarm:coredns", "ClusterRoleBinding kubefarm:coredns", "ServiceAccount kube-system/coredns",
		"ConfigMap kube-system/coredns", "Service kube-system/kube-dns", "Deployment kube-system/coredns",
	}
	namesPolicy = []string{
		"ValidatingAdmissionPolicy " + ProbeHostPolicyName, "ValidatingAdmissionPolicyBinding " + ProbeHostPolicyName,
	}
)

func TestAddonsOrderAndNames(t *testing.T) {
	got := names(mustAddons(t, addonCluster(t), allAddons()))
	want := []string{
		"Namespace kube-system",
		"ClusterRole kubefarm:node-network",
		"ClusterRole kubefarm:coredns",
		"ClusterRoleBinding kubefarm:kubelet-bootstrap",
		"ClusterRoleBinding kubefarm:node-autoapprove-certificate-rotation",
		"ClusterRoleBinding kubefarm:node-network",
		"ClusterRoleBinding kubefarm:node-proxier",
		"ClusterRoleBinding kubefarm:coredns",
		"Role kube-public/kubefarm:bootstrap-signer-clusterinfo",
		"Role kube-system/kubefarm:kubelet-config",
		"Role kube-system/kubefarm:token-issuer",
		"RoleBinding kube-public/kubefarm:bootstrap-signer-clusterinfo",
		"RoleBinding kube-system/kubefarm:kubelet-config",
		"RoleBinding kube-system/kubefarm:token-issuer",
		"ServiceAccount kube-system/konnectivity-agent",
		"ServiceAccount kube-system/kube-proxy",
		"ServiceAccount kube-system/coredns",
		"ConfigMap kube-public/cluster-info",
		"ConfigMap kube-system/kubelet-config",
		"ConfigMap kube-system/kube-proxy",
		"ConfigMap kube-system/coredns",
		"Service kube-system/kube-dns",
		"DaemonSet kube-system/konnectivity-agent",
		"DaemonSet kube-system/kube-proxy",
		"Deployment kube-system/coredns",
		"ValidatingAdmissionPolicy " + TokenIssuerPolicyName,
		"ValidatingAdmissionPolicyBinding " + TokenIssuerPolicyName,
		"ValidatingAdmissionPolicy " + ProbeHostPolicyName,
		"ValidatingAdmissionPolicyBinding " + ProbeHostPolicyName,
	}
	if !slices.Equal(got, want) {
		t.Errorf("names/order:\n got %q\nwant %q", got, want)
	}
}

func TestAddonsSwitches(t *testing.T) {
	for _, tc := range []struct {
		name    string
		konn    bool
		mode    v1alpha1.KubeProxyMode
		coreDNS bool
		policy  bool
		want    [][]string
		absent  [][]string
	}{
		{name: "all", konn: true, mode: "", coreDNS: true, policy: true,
			want: [][]string{namesBase, namesKonnectivity, namesKubeProxy, namesCoreDNS, namesPolicy}},
		{name: "no konnectivity", konn: false, mode: "ipvs", coreDNS: true, policy: true,
			want: [][]string{namesBase, namesKubeProxy, namesCoreDNS, namesPolicy}, absent: [][]string{namesKonnectivity}},
		{name: "kube-proxy none", konn: true, mode: "none", coreDNS: true, policy: true,
			want: [][]string{namesBase, namesKonnectivity, namesCoreDNS, namesPolicy}, absent: [][]string{namesKubeProxy}},
		{name: "no coredns", konn: true, mode: "nftables", coreDNS: false, policy: true,
			want: [][]string{namesBase, namesKonnectivity, namesKubeProxy, namesPolicy}, absent: [][]string{namesCoreDNS}},
		{name: "no policy", konn: true, mode: "iptables", coreDNS: true, policy: false,
			want: [][]string{namesBase, namesKonnectivity, namesKubeProxy, namesCoreDNS}, absent: [][]string{namesPolicy}},
		{name: "minimal", konn: false, mode: "none", coreDNS: false, policy: false,
			want: [][]string{namesBase}, absent: [][]string{namesKonnectivity, namesKubeProxy, namesCoreDNS, namesPolicy}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := addonCluster(t, konnectivity(tc.konn))
			in := allAddons()
			in.KubeProxyMode, in.CoreDNS, in.ProbeHostPolicy = tc.mode, tc.coreDNS, tc.policy
			got := names(mustAddons(t, c, in))
			var want []string
			for _, w := range tc.want {
				want = append(want, w...)
			}
			slices.Sort(want)
			sorted := slices.Sorted(slices.Values(got))
			if !slices.Equal(sorted, want) {
				t.Errorf("got %q\nwant %q", sorted, want)
			}
			for _, a := range tc.absent {
				for _, n := range a {
					if slices.Contains(got, n) {
						t.Errorf("%s built although switched off", n)
					}
				}
			}
			// AddonNames agrees with Addons, and needs no endpoint or CA.
			in.Endpoint, in.CACert = "", nil
			n, err := AddonNames(c, in)
			if err != nil {
				t.Fatalf("AddonNames: %v", err)
			}
			if !slices.Equal(n, got) {
				t.Errorf("AddonNames %q\n!= Addons %q", n, got)
			}
		})
	}
}

func TestAddonsDeterministic(t *testing.T) {
	mk := func() []client.Object {
		c := addonCluster(t, func(tc *v1alpha1.TenantCluster) { tc.Spec.Network.PodCIDR = "10.244.0.0/16" })
		in := allAddons()
		in.KubeProxyMode = "ipvs"
		return mustAddons(t, c, in)
	}
	first := mk()
	for range 5 {
		again := mk()
		if len(again) != len(first) {
			t.Fatalf("%d objects, then %d", len(first), len(again))
		}
		for i := range first {
			a, err := json.Marshal(first[i])
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(again[i])
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, b) {
				t.Fatalf("%s differs between builds:\n%s\n%s", ObjectName(first[i]), a, b)
			}
		}
	}
}

func TestAddonsMetadata(t *testing.T) {
	// NodePort adds the kubernetes Service's endpoints in default.
	objs := mustAddons(t, addonCluster(t, nodePort), allAddons())
	for _, o := range objs {
		name := ObjectName(o)
		gvk := o.GetObjectKind().GroupVersionKind()
		if gvk.Kind == "" || gvk.Version == "" {
			t.Errorf("%s: no TypeMeta", name)
		}
		if o.GetLabels()[LabelManagedBy] != managedBy {
			t.Errorf("%s: labels %v lack %s=%s", name, o.GetLabels(), LabelManagedBy, managedBy)
		}
		// What the tenant's API server would refuse on apply.
		if errs := metav1validation.ValidateLabels(o.GetLabels(), field.NewPath("metadata", "labels")); len(errs) > 0 {
			t.Errorf("%s: %v", name, errs.ToAggregate())
		}
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		// Typed objects serialize required status fields as zeros; a server
		// ignores status on the main resource, but nothing may be set.
		if s, ok := m["status"]; ok && !allZero(s) {
			t.Errorf("%s: has status %v", name, s)
		}
		if ns := o.GetNamespace(); ns != "" && ns != nsKubeSystem && ns != nsKubePublic &&
			!(ns == metav1.NamespaceDefault && o.GetName() == kubernetesServiceName) {
			t.Errorf("%s: namespace %q", name, ns)
		}
	}
	if !slices.ContainsFunc(objs, func(o client.Object) bool { return ObjectName(o) == "EndpointSlice default/kubernetes" }) {
		t.Error("the NodePort add-ons lack the kubernetes Service's EndpointSlice")
	}
}

// allZero says whether a decoded JSON value holds only zeros, empty strings,
// false and empty collections.
func allZero(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			if !allZero(e) {
				return false
			}
		}
		return true
	case []any:
		return len(v) == 0
	case nil:
		return true
	case float64:
		return v == 0
	case string:
		return v == ""
	case bool:
		return !v
	}
	return false
}

func TestAddonsErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Cluster, *AddonInputs)
		want string
	}{
		{"no endpoint", func(_ *Cluster, in *AddonInputs) { in.Endpoint = "" }, "not known yet"},
		{"http endpoint", func(_ *Cluster, in *AddonInputs) { in.Endpoint = "http://10.0.0.5:6443" }, "https URL"},
		{"endpoint with path", func(_ *Cluster, in *AddonInputs) { in.Endpoint = "https://10.0.0.5:6443/x" }, "no path"},
		{"no CA", func(_ *Cluster, in *AddonInputs) { in.CACert = nil }, "alpha-ca"},
		{"CA not PEM", func(_ *Cluster, in *AddonInputs) { in.CACert = []byte("hello") }, "not a PEM certificate"},
		{"bad mode", func(_ *Cluster, in *AddonInputs) { in.KubeProxyMode = "userspace" }, "spec.kubeProxy.mode"},
		{"bad konnectivity endpoint", func(_ *Cluster, in *AddonInputs) { in.KonnectivityEndpoint = "10.0.0.5" }, "konnectivity endpoint"},
		{"konnectivity port 0", func(_ *Cluster, in *AddonInputs) { in.KonnectivityEndpoint = "10.0.0.5:0" }, "konnectivity endpoint"},
		{"no coredns tag", func(c *Cluster, _ *AddonInputs) { c.Images.CoreDNSTag = "" }, "options.images.coreDNSTag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := addonCluster(t)
			in := allAddons()
			tc.mod(c, &in)
			_, err := Addons(c, in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	// Without CoreDNS its tag is not needed.
	c := resolveTC(t)
	in := allAddons()
	in.CoreDNS = false
	if _, err := Addons(c, in); err != nil {
		t.Errorf("no CoreDNS, no tag: %v", err)
	}
}

func TestClusterInfo(t *testing.T) {
	objs := mustAddons(t, addonCluster(t), allAddons())
	cm := findAddon[*corev1.ConfigMap](t, objs, "ConfigMap kube-public/cluster-info")
	// Only the key we own: server-side apply must leave the bootstrapsigner's
	// jws-kubeconfig-* keys alone.
	if keys := sortedKeys(cm.Data); !slices.Equal(keys, []string{"kubeconfig"}) || cm.BinaryData != nil {
		t.Fatalf("keys %v, binaryData %v", keys, cm.BinaryData)
	}
	cfg, err := clientcmd.Load([]byte(cm.Data["kubeconfig"]))
	if err != nil {
		t.Fatalf("kubeconfig does not parse: %v", err)
	}
	if len(cfg.Clusters) != 1 || len(cfg.AuthInfos) != 0 {
		t.Fatalf("clusters %v, users %v", cfg.Clusters, cfg.AuthInfos)
	}
	for _, cl := range cfg.Clusters {
		if cl.Server != "https://10.0.0.5:31443" || string(cl.CertificateAuthorityData) != testCAPEM {
			t.Errorf("server %q CA %q", cl.Server, cl.CertificateAuthorityData)
		}
	}
	// Anonymous users (joining machines) may read exactly this ConfigMap.
	role := findAddon[*rbacv1.Role](t, objs, "Role kube-public/kubefarm:bootstrap-signer-clusterinfo")
	if r := role.Rules; len(r) != 1 || !slices.Equal(r[0].ResourceNames, []string{"cluster-info"}) || !slices.Equal(r[0].Verbs, []string{"get"}) {
		t.Errorf("rules %+v", r)
	}
	rb := findAddon[*rbacv1.RoleBinding](t, objs, "RoleBinding kube-public/kubefarm:bootstrap-signer-clusterinfo")
	if !hasSubject(rb.Subjects, rbacv1.UserKind, "system:anonymous") || !hasSubject(rb.Subjects, rbacv1.GroupKind, GroupBootstrappers) {
		t.Errorf("subjects %+v", rb.Subjects)
	}
}

func hasSubject(subjects []rbacv1.Subject, kind, name string) bool {
	return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool { return s.Kind == kind && s.Name == name })
}

func TestBootstrapRBAC(t *testing.T) {
	objs := mustAddons(t, addonCluster(t), allAddons())
	for _, tc := range []struct{ binding, role, group string }{
		{"kubefarm:kubelet-bootstrap", "system:node-bootstrapper", GroupBootstrappers},
		{"kubefarm:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"},
	} {
		b := findAddon[*rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding "+tc.binding)
		if b.RoleRef.Name != tc.role || b.RoleRef.Kind != "ClusterRole" || len(b.Subjects) != 1 || !hasSubject(b.Subjects, rbacv1.GroupKind, tc.group) {
			t.Errorf("%s: roleRef %+v subjects %+v", tc.binding, b.RoleRef, b.Subjects)
		}
	}
	// No one's kubelet client CSRs are approved for any node name: the
	// manager approves the bootstrappers' for their Machine's name only.
	for _, o := range objs {
		if b, ok := o.(*rbacv1.ClusterRoleBinding); ok && b.RoleRef.Name == "system:certificates.k8s.io:certificatesigningrequests:nodeclient" {
			t.Errorf("%s lets kube-controller-manager approve any node name for %+v", b.Name, b.Subjects)
		}
	}
	// Nodes may read Nodes (flanneld's routes) and nothing more.
	nb := findAddon[*rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding "+NodeNetworkRole)
	nr := findAddon[*rbacv1.ClusterRole](t, objs, "ClusterRole "+NodeNetworkRole)
	if nb.RoleRef.Name != NodeNetworkRole || len(nb.Subjects) != 1 || !hasSubject(nb.Subjects, rbacv1.GroupKind, "system:nodes") ||
		!reflect.DeepEqual(nr.Rules, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}}) {
		t.Errorf("%s: binding %+v rules %+v", NodeNetworkRole, nb, nr.Rules)
	}
	rb := findAddon[*rbacv1.RoleBinding](t, objs, "RoleBinding kube-system/kubefarm:kubelet-config")
	if !hasSubject(rb.Subjects, rbacv1.GroupKind, "system:nodes") || !hasSubject(rb.Subjects, rbacv1.GroupKind, GroupBootstrappers) {
		t.Errorf("kubelet-config subjects %+v", rb.Subjects)
	}
	role := findAddon[*rbacv1.Role](t, objs, "Role kube-system/kubefarm:kubelet-config")
	if !slices.Equal(role.Rules[0].ResourceNames, []string{KubeletConfigMapName}) {
		t.Errorf("kubelet-config rules %+v", role.Rules)
	}
}

// TestRetiredAddons: the bootstrappers' nodeclient auto-approval is no
// longer an add-on, and is among the objects the controller prunes.
func TestRetiredAddons(t *testing.T) {
	built := names(mustAddons(t, addonCluster(t), allAddons()))
	retired := names(RetiredAddons())
	if !slices.Equal(retired, []string{"ClusterRoleBinding " + RetiredNodeClientApproval}) {
		t.Errorf("retired %q", retired)
	}
	for _, r := range retired {
		if slices.Contains(built, r) {
			t.Errorf("%s is retired and still built", r)
		}
	}
	for _, o := range RetiredAddons() {
		if o.GetObjectKind().GroupVersionKind().Kind == "" || o.GetLabels()[LabelManagedBy] != managedBy {
			t.Errorf("%s: the pruner needs its kind and matches on the managed-by label: %+v", ObjectName(o), o)
		}
	}
}

// TestTokenIssuerRBAC: the token issuer may create Secrets of kube-system
// and nothing else, and the binding names its user alone.
func TestTokenIssuerRBAC(t *testing.T) {
	objs := mustAddons(t, addonCluster(t), allAddons())
	role := findAddon[*rbacv1.Role](t, objs, "Role kube-system/kubefarm:token-issuer")
	want := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}}
	if len(role.Rules) != 1 || !reflect.DeepEqual(role.Rules[0], want) {
		t.Errorf("rules %+v, want only %+v", role.Rules, want)
	}
	rb := findAddon[*rbacv1.RoleBinding](t, objs, "RoleBinding kube-system/kubefarm:token-issuer")
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name || len(rb.Subjects) != 1 ||
		!hasSubject(rb.Subjects, rbacv1.UserKind, UserTokenIssuer) {
		t.Errorf("binding roleRef %+v subjects %+v", rb.RoleRef, rb.Subjects)
	}
	cert := CertificateFor(addonCluster(t), RoleTokenIssuer)
	if cert.Spec.CommonName != UserTokenIssuer || cert.Spec.Subject != nil {
		t.Errorf("the binding's user %q is not the certificate's identity (CN %q, subject %+v)", UserTokenIssuer, cert.Spec.CommonName, cert.Spec.Subject)
	}
}

func TestKubeletConfig(t *testing.T) {
	c := addonCluster(t, func(tc *v1alpha1.TenantCluster) {
		tc.Spec.Network.ServiceCIDR = "10.100.0.0/16"
		tc.Spec.Network.DNSServiceIP = "10.100.0.53"
		tc.Spec.Network.ClusterDomain = "tenant.example"
	})
	cm := findAddon[*corev1.ConfigMap](t, mustAddons(t, c, allAddons()), "ConfigMap kube-system/kubelet-config")
	var got map[string]any
	if err := yaml.UnmarshalStrict([]byte(cm.Data[KubeletConfigKey]), &got); err != nil {
		t.Fatalf("kubelet config does not parse: %v\n%s", err, cm.Data[KubeletConfigKey])
	}
	want := map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true, "cacheTTL": "2m0s"},
			"x509":      map[string]any{"clientCAFile": "/etc/kubernetes/pki/ca.crt"},
		},
		"authorization": map[string]any{
			"mode":    "Webhook",
			"webhook": map[string]any{"cacheAuthorizedTTL": "5m0s", "cacheUnauthorizedTTL": "30s"},
		},
		"cgroupDriver":             "systemd",
		"clusterDNS":               []any{"10.100.0.53"},
		"clusterDomain":            "tenant.example",
		"containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
		"rotateCertificates":       true,
		"serverTLSBootstrap":       true,
	}
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Errorf("kubelet config\n got %s\nwant %s", gotJSON, wantJSON)
	}
}

func TestKubeProxy(t *testing.T) {
	for _, tc := range []struct {
		mode     v1alpha1.KubeProxyMode
		podCIDR  string
		wantMode string
	}{
		{"", "", "iptables"},
		{"iptables", "10.244.0.0/16", "iptables"},
		{"ipvs", "10.244.0.0/16", "ipvs"},
		{"nftables", "", "nftables"},
	} {
		t.Run(tc.wantMode+"/"+tc.podCIDR, func(t *testing.T) {
			c := addonCluster(t, func(t *v1alpha1.TenantCluster) { t.Spec.Network.PodCIDR = tc.podCIDR })
			in := allAddons()
			in.KubeProxyMode = tc.mode
			objs := mustAddons(t, c, in)
			cm := findAddon[*corev1.ConfigMap](t, objs, "ConfigMap kube-system/kube-proxy")
			var conf map[string]any
			if err := yaml.Unmarshal([]byte(cm.Data["config.conf"]), &conf); err != nil {
				t.Fatal(err)
			}
			if conf["mode"] != tc.wantMode || conf["kind"] != "KubeProxyConfiguration" || conf["apiVersion"] != "kubeproxy.config.k8s.io/v1alpha1" {
				t.Errorf("config.conf: %v", conf)
			}
			if cidr, _ := conf["clusterCIDR"].(string); cidr != tc.podCIDR {
				t.Errorf("clusterCIDR %q, want %q", cidr, tc.podCIDR)
			}
			if _, ipvs := conf["ipvs"]; ipvs != (tc.wantMode == "ipvs") {
				t.Errorf("ipvs block present=%v in mode %s", ipvs, tc.wantMode)
			}
			if cc := conf["clientConnection"].(map[string]any)["kubeconfig"]; cc != "/var/lib/kube-proxy/kubeconfig.conf" {
				t.Errorf("clientConnection.kubeconfig %v", cc)
			}
			kc, err := clientcmd.Load([]byte(cm.Data["kubeconfig.conf"]))
			if err != nil {
				t.Fatal(err)
			}
			cl, user := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster], kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]
			if cl.Server != in.Endpoint || cl.CertificateAuthority != saDir+"/ca.crt" || user.TokenFile != saDir+"/token" {
				t.Errorf("kubeconfig cluster %+v user %+v", cl, user)
			}

			ds := findAddon[*appsv1.DaemonSet](t, objs, "DaemonSet kube-system/kube-proxy")
			ps := ds.Spec.Template.Spec
			ctr := ps.Containers[0]
			if ctr.Image != "registry.example.com/k8s/kube-proxy:v1.34.4" || !ps.HostNetwork ||
				ctr.SecurityContext == nil || !*ctr.SecurityContext.Privileged ||
				ps.PriorityClassName != "system-node-critical" || ps.ServiceAccountName != "kube-proxy" ||
				ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
				t.Errorf("kube-proxy pod: %+v", ps)
			}
			if !slices.Contains(ctr.Command, "--config=/var/lib/kube-proxy/config.conf") {
				t.Errorf("command %v", ctr.Command)
			}
			mounts := map[string]string{}
			for _, m := range ctr.VolumeMounts {
				mounts[m.MountPath] = m.Name
			}
			for _, p := range []string{"/run/xtables.lock", "/lib/modules", "/var/lib/kube-proxy"} {
				if mounts[p] == "" {
					t.Errorf("no mount at %s: %v", p, mounts)
				}
			}
			if ds.Spec.Template.Annotations[v1alpha1.AnnotationChecksum] != configHash(cm) {
				t.Errorf("checksum annotation does not hash the ConfigMap")
			}
			binding := findAddon[*rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding kubefarm:node-proxier")
			if binding.RoleRef.Name != "system:node-proxier" || !hasSubject(binding.Subjects, rbacv1.ServiceAccountKind, "kube-proxy") {
				t.Errorf("binding %+v", binding)
			}
		})
	}
	// A changed mode rolls the pods.
	c := addonCluster(t)
	in := allAddons()
	in.KubeProxyMode = "iptables"
	a := findAddon[*appsv1.DaemonSet](t, mustAddons(t, c, in), "DaemonSet kube-system/kube-proxy")
	in.KubeProxyMode = "nftables"
	b := findAddon[*appsv1.DaemonSet](t, mustAddons(t, c, in), "DaemonSet kube-system/kube-proxy")
	if a.Spec.Template.Annotations[v1alpha1.AnnotationChecksum] == b.Spec.Template.Annotations[v1alpha1.AnnotationChecksum] {
		t.Error("changing the mode does not change the pod template")
	}
}

func TestKonnectivityAgent(t *testing.T) {
	for _, tc := range []struct {
		name      string
		endpoint  string
		konnEP    string
		serviceNW string
		host      string
		port      string
		ipKey     string
	}{
		{"from endpoint", "https://10.0.0.5:31443", "", "", "10.0.0.5", "8132", "ipv4"},
		{"hostname endpoint", "https://api.tenant.example", "", "", "api.tenant.example", "8132", "ipv4"},
		{"node port", "https://10.0.0.5:31443", "10.0.0.5:31132", "", "10.0.0.5", "31132", "ipv4"},
		{"ipv6", "https://[fd00::5]:6443", "", "fd00:10::/108", "fd00::5", "8132", "ipv6"},
		{"ipv6 node port", "https://[fd00::5]:6443", "[fd00::6]:30000", "fd00:10::/108", "fd00::6", "30000", "ipv6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := addonCluster(t, func(t *v1alpha1.TenantCluster) { t.Spec.Network.ServiceCIDR = tc.serviceNW })
			in := allAddons()
			in.Endpoint, in.KonnectivityEndpoint = tc.endpoint, tc.konnEP
			objs := mustAddons(t, c, in)
			ds := findAddon[*appsv1.DaemonSet](t, objs, "DaemonSet kube-system/konnectivity-agent")
			ps := ds.Spec.Template.Spec
			ctr := ps.Containers[0]
			if !slices.IsSorted(ctr.Args) {
				t.Errorf("args not sorted: %v", ctr.Args)
			}
			args := flagMap(t, ctr.Args)
			if args["proxy-server-host"] != tc.host || args["proxy-server-port"] != tc.port {
				t.Errorf("agent dials %s:%s, want %s:%s", args["proxy-server-host"], args["proxy-server-port"], tc.host, tc.port)
			}
			if !strings.Contains(args["agent-identifiers"], tc.ipKey+"=$(HOST_IP)") {
				t.Errorf("agent-identifiers %q", args["agent-identifiers"])
			}
			if ctr.Image != "registry.example.com/k8s/kas-network-proxy/proxy-agent:v0.34.0" || ctr.Command[0] != "/proxy-agent" {
				t.Errorf("image %s command %v", ctr.Image, ctr.Command)
			}

			// The agent's identity and token audience are what the server checks.
			sflags, err := KonnectivityServerFlags(c)
			if err != nil {
				t.Fatal(err)
			}
			server := flagMap(t, sflags)
			if ds.Namespace != server["agent-namespace"] || ps.ServiceAccountName != server["agent-service-account"] {
				t.Errorf("agent runs as %s/%s, server expects %s/%s", ds.Namespace, ps.ServiceAccountName,
					server["agent-namespace"], server["agent-service-account"])
			}
			findAddon[*corev1.ServiceAccount](t, objs, "ServiceAccount kube-system/"+ps.ServiceAccountName)
			files := map[string]string{} // path in container -> what it holds
			for _, v := range ps.Volumes {
				if v.Projected == nil {
					continue
				}
				var mount string
				for _, m := range ctr.VolumeMounts {
					if m.Name == v.Name {
						mount = m.MountPath
					}
				}
				for _, s := range v.Projected.Sources {
					switch {
					case s.ServiceAccountToken != nil:
						if s.ServiceAccountToken.Audience != server["authentication-audience"] || *s.ServiceAccountToken.ExpirationSeconds != 3600 {
							t.Errorf("token %+v", s.ServiceAccountToken)
						}
						files[mount+"/"+s.ServiceAccountToken.Path] = "token"
					case s.ConfigMap != nil && s.ConfigMap.Name == "kube-root-ca.crt":
						files[mount+"/"+s.ConfigMap.Items[0].Path] = "ca"
					}
				}
			}
			if files[args["service-account-token-path"]] != "token" || files[args["ca-cert"]] != "ca" {
				t.Errorf("token/CA flags %q %q do not point at projected files %v", args["service-account-token-path"], args["ca-cert"], files)
			}
			if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
				t.Error("the agent must not get an API token")
			}
			if ps.PriorityClassName != "system-node-critical" || len(ps.Tolerations) != 1 || ps.Tolerations[0].Operator != corev1.TolerationOpExists {
				t.Errorf("priority %q tolerations %+v", ps.PriorityClassName, ps.Tolerations)
			}
			if p := ctr.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Port.IntVal != KonnectivityHealthPort ||
				args["health-server-port"] != "8134" {
				t.Errorf("liveness %+v, health port %s", p, args["health-server-port"])
			}
		})
	}
}

func TestCoreDNS(t *testing.T) {
	c := addonCluster(t, func(tc *v1alpha1.TenantCluster) {
		tc.Spec.Network.ServiceCIDR = "10.100.0.0/16"
		tc.Spec.Network.DNSServiceIP = "10.100.0.53"
		tc.Spec.Network.ClusterDomain = "tenant.example"
	})
	objs := mustAddons(t, c, allAddons())
	svc := findAddon[*corev1.Service](t, objs, "Service kube-system/kube-dns")
	if svc.Spec.ClusterIP != c.DNSServiceIP.String() || svc.Spec.ClusterIP != "10.100.0.53" || svc.Labels[labelK8sApp] != "kube-dns" {
		t.Errorf("Service clusterIP %s labels %v", svc.Spec.ClusterIP, svc.Labels)
	}
	var ports []string
	for _, p := range svc.Spec.Ports {
		ports = append(ports, fmt.Sprintf("%s/%s/%d", p.Protocol, p.TargetPort.String(), p.Port))
	}
	if !slices.Equal(ports, []string{"UDP/dns/53", "TCP/dns-tcp/53", "TCP/metrics/9153"}) {
		t.Errorf("ports %v", ports)
	}
	dep := findAddon[*appsv1.Deployment](t, objs, "Deployment kube-system/coredns")
	ps := dep.Spec.Template.Spec
	ctr := ps.Containers[0]
	if *dep.Spec.Replicas != 2 || ctr.Image != "registry.example.com/k8s/coredns/coredns:v1.12.1" ||
		ps.PriorityClassName != "system-cluster-critical" || ps.DNSPolicy != corev1.DNSDefault {
		t.Errorf("deployment %+v", dep.Spec)
	}
	// The Service selects the Deployment's pods and its named ports exist.
	for k, v := range svc.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %v does not select pods %v", svc.Spec.Selector, dep.Spec.Template.Labels)
		}
	}
	for _, p := range svc.Spec.Ports {
		if !slices.ContainsFunc(ctr.Ports, func(cp corev1.ContainerPort) bool {
			return cp.Name == p.TargetPort.StrVal && cp.Protocol == p.Protocol
		}) {
			t.Errorf("Service port %s has no container port", p.Name)
		}
	}
	if ctr.ReadinessProbe.HTTPGet.Path != "/ready" || ctr.ReadinessProbe.HTTPGet.Port.IntVal != 8181 ||
		ctr.LivenessProbe.HTTPGet.Path != "/health" || ctr.LivenessProbe.HTTPGet.Port.IntVal != 8080 {
		t.Errorf("probes %+v %+v", ctr.ReadinessProbe, ctr.LivenessProbe)
	}
	sc := ctr.SecurityContext
	if !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_BIND_SERVICE"}) || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		!*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation {
		t.Errorf("security context %+v", sc)
	}
	if aff := ps.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution; len(aff) != 1 || aff[0].PodAffinityTerm.TopologyKey != corev1.LabelHostname {
		t.Errorf("anti-affinity %+v", aff)
	}
	cm := findAddon[*corev1.ConfigMap](t, objs, "ConfigMap kube-system/coredns")
	for _, want := range []string{"kubernetes tenant.example in-addr.arpa ip6.arpa {", "lameduck 5s", "prometheus :9153", "forward . /etc/resolv.conf", "ttl 30", "loadbalance"} {
		if !strings.Contains(cm.Data["Corefile"], want) {
			t.Errorf("Corefile lacks %q:\n%s", want, cm.Data["Corefile"])
		}
	}
	cr := findAddon[*rbacv1.ClusterRole](t, objs, "ClusterRole kubefarm:coredns")
	var resources []string
	for _, r := range cr.Rules {
		if !slices.Equal(r.Verbs, []string{"list", "watch"}) {
			t.Errorf("rule %+v grants more than list/watch", r)
		}
		resources = append(resources, r.Resources...)
	}
	slices.Sort(resources)
	if !slices.Equal(resources, []string{"endpoints", "endpointslices", "namespaces", "pods", "services"}) {
		t.Errorf("resources %v", resources)
	}
}

func TestKubeSystemPodSecurity(t *testing.T) {
	ns := findAddon[*corev1.Namespace](t, mustAddons(t, addonCluster(t), allAddons()), "Namespace kube-system")
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("kube-system labels %v: kube-proxy would be rejected", ns.Labels)
	}
}

func TestProbeHostPolicy(t *testing.T) {
	objs := mustAddons(t, addonCluster(t), allAddons())
	p := findAddon[*admissionv1.ValidatingAdmissionPolicy](t, objs, "ValidatingAdmissionPolicy "+ProbeHostPolicyName)
	b := findAddon[*admissionv1.ValidatingAdmissionPolicyBinding](t, objs, "ValidatingAdmissionPolicyBinding "+ProbeHostPolicyName)
	if b.Spec.PolicyName != p.Name || !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
		t.Errorf("binding %+v", b.Spec)
	}
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionv1.Fail {
		t.Errorf("failurePolicy %v", p.Spec.FailurePolicy)
	}
	var rules []string
	for _, r := range p.Spec.MatchConstraints.ResourceRules {
		for _, op := range r.Operations {
			rules = append(rules, string(op)+" "+strings.Join(r.Resources, ","))
		}
		if !slices.Equal(r.APIGroups, []string{""}) || !slices.Equal(r.APIVersions, []string{"v1"}) {
			t.Errorf("rule %+v", r)
		}
	}
	if !slices.Equal(rules, []string{"CREATE pods", "UPDATE pods/ephemeralcontainers"}) {
		t.Errorf("rules %v", rules)
	}
	// The expressions are compiled and evaluated only against a real API
	// server (e2e): k8s.io/apiserver's CEL is not a dependency. Check here
	// what can go wrong without a compiler: every list, probe, hook and
	// handler is covered, and no field is read without a has() guard.
	if len(p.Spec.Validations) != 3 {
		t.Fatalf("%d validations", len(p.Spec.Validations))
	}
	for i, list := range []string{"containers", "initContainers", "ephemeralContainers"} {
		v := p.Spec.Validations[i]
		for _, e := range []string{v.Expression, v.MessageExpression} {
			if strings.Count(e, "(") != strings.Count(e, ")") {
				t.Errorf("%s: unbalanced parentheses: %s", list, e)
			}
			if !strings.Contains(e, "object.spec."+list+".") {
				t.Errorf("expression does not check spec.%s: %s", list, e)
			}
		}
		if !strings.HasPrefix(v.Expression, "!has(object.spec."+list+") || ") {
			t.Errorf("%s: list not guarded: %s", list, v.Expression)
		}
		for _, h := range handlerPaths {
			for _, a := range []string{"httpGet", "tcpSocket"} {
				x := "c." + h + "." + a
				if !strings.Contains(v.Expression, "!has("+x+") || !has("+x+".host) || "+x+".host == ''") {
					t.Errorf("%s: %s.host not checked with guards", list, x)
				}
			}
		}
		if !strings.Contains(v.Message, "spec."+list+"[*]") || !strings.Contains(v.Message, "arbitrary address") {
			t.Errorf("message %q", v.Message)
		}
	}
	if g := celNoHost("c.lifecycle.preStop"); !strings.HasPrefix(g, "(!(has(c.lifecycle) && has(c.lifecycle.preStop)) || ") {
		t.Errorf("nested handler not guarded level by level: %s", g)
	}
}

// TestTokenIssuerPolicyShape checks what can be checked without a CEL
// compiler (the expressions themselves are evaluated by a real API server in
// controllers/tenantcluster's TestTokenIssuerPolicy): bound to deny, fails
// closed, matches every write of the issuer and no one else's, and every
// validation but the first reads the object only behind the guard.
func TestTokenIssuerPolicyShape(t *testing.T) {
	objs := mustAddons(t, addonCluster(t), allAddons())
	p := findAddon[*admissionv1.ValidatingAdmissionPolicy](t, objs, "ValidatingAdmissionPolicy "+TokenIssuerPolicyName)
	b := findAddon[*admissionv1.ValidatingAdmissionPolicyBinding](t, objs, "ValidatingAdmissionPolicyBinding "+TokenIssuerPolicyName)
	if b.Spec.PolicyName != p.Name || !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) || b.Spec.ParamRef != nil {
		t.Errorf("binding %+v", b.Spec)
	}
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionv1.Fail {
		t.Errorf("failurePolicy %v", p.Spec.FailurePolicy)
	}
	rules := p.Spec.MatchConstraints.ResourceRules
	if len(rules) != 1 || !slices.Equal(rules[0].Operations, []admissionv1.OperationType{admissionv1.OperationAll}) ||
		!slices.Equal(rules[0].APIGroups, []string{"*"}) || !slices.Equal(rules[0].Resources, []string{"*/*"}) {
		t.Errorf("match constraints %+v", rules)
	}
	if len(p.Spec.MatchConditions) != 1 || p.Spec.MatchConditions[0].Expression != "request.userInfo.username == '"+UserTokenIssuer+"'" {
		t.Errorf("match conditions %+v", p.Spec.MatchConditions)
	}
	if len(p.Spec.Validations) < 2 || p.Spec.Validations[0].Expression != "variables.isTokenCreate" {
		t.Fatalf("validations %+v", p.Spec.Validations)
	}
	for _, v := range p.Spec.Validations[1:] {
		if !strings.HasPrefix(v.Expression, "!variables.isTokenCreate || (") {
			t.Errorf("unguarded: %s", v.Expression)
		}
		if strings.Count(v.Expression, "(") != strings.Count(v.Expression, ")") {
			t.Errorf("unbalanced parentheses: %s", v.Expression)
		}
		if !strings.HasPrefix(v.Message, "kubefarm:token-issuer may only create kubefarm bootstrap tokens: ") {
			t.Errorf("message %q", v.Message)
		}
	}
}

// The join RBAC binds the group the token issuer puts tokens in; the two
// packages must agree or no machine can join.
func TestBootstrapGroupMatchesTokenIssuer(t *testing.T) {
	if GroupBootstrappers != bootstraptoken.DefaultGroup {
		t.Fatalf("build.GroupBootstrappers %q != bootstraptoken.DefaultGroup %q", GroupBootstrappers, bootstraptoken.DefaultGroup)
	}
}

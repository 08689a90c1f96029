// Package charts_test checks the Helm charts in this directory with the Helm
// Go SDK: lint, render, values schema and deterministic output.
package charts_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
)

const (
	chartDir    = "kubefarm-operator"
	release     = "kubefarm"
	namespace   = "kubefarm-system"
	kubeVersion = "v1.31.0" // the oldest version Chart.yaml accepts

	// Names the chart gives its objects for release "kubefarm".
	managerName    = "kubefarm-manager"
	webhookSvcName = "kubefarm-webhook"
	metricsSvcName = "kubefarm-metrics"
	leaderElection = "kubefarm-leader-election"
	webhookCfgName = "kubefarm"
	certDir        = "/tmp/k8s-webhook-server/serving-certs"
)

// ---- helpers ------------------------------------------------------------------

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading chart %s: %v", chartDir, err)
	}
	return ch
}

func capabilities(t *testing.T) *chartutil.Capabilities {
	t.Helper()
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatalf("parsing %s: %v", kubeVersion, err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	return caps
}

// values parses a values file the way `helm install -f` does.
func values(t *testing.T, doc string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValues([]byte(doc))
	if err != nil {
		t.Fatalf("parsing values %q: %v", doc, err)
	}
	return v.AsMap()
}

// tryRender renders the chart as `helm template kubefarm -n kubefarm-system`
// does, schema validation included, and returns the rendered files.
func tryRender(t *testing.T, vals map[string]any) (map[string]string, error) {
	t.Helper()
	return renderChart(t, chartDir, release, namespace, vals)
}

// renderChart renders the chart in dir as `helm template <rel> <dir> -n
// <ns>` does, schema validation included.
func renderChart(t *testing.T, dir, rel, ns string, vals map[string]any) (map[string]string, error) {
	t.Helper()
	ch, err := loader.Load(dir)
	if err != nil {
		t.Fatalf("loading chart %s: %v", dir, err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{
		Name: rel, Namespace: ns, Revision: 1, IsInstall: true,
	}, capabilities(t))
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, rv)
}

func render(t *testing.T, vals map[string]any) map[string]string {
	t.Helper()
	files, err := tryRender(t, vals)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	return files
}

// decodeDocs splits a multi-document YAML stream and decodes every non-empty
// document into an Unstructured (integers stay int64).
func decodeDocs(t *testing.T, source string, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("%s: reading YAML: %v", source, err)
		}
		js, err := k8syaml.ToJSON(doc)
		if err != nil {
			t.Fatalf("%s: invalid YAML: %v\n%s", source, err, doc)
		}
		if s := strings.TrimSpace(string(js)); s == "null" || s == "" {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(js); err != nil {
			t.Fatalf("%s: decoding object: %v\n%s", source, err, doc)
		}
		objs = append(objs, obj)
	}
}

// objects decodes every rendered manifest, in template file order.
func objects(t *testing.T, files map[string]string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, name := range sortedKeys(files) {
		if filepath.Ext(name) != ".yaml" {
			continue // NOTES.txt
		}
		objs = append(objs, decodeDocs(t, name, []byte(files[name]))...)
	}
	return objs
}

func renderObjects(t *testing.T, vals map[string]any) []*unstructured.Unstructured {
	t.Helper()
	return objects(t, render(t, vals))
}

// generated decodes a file that `make generate` wrote into the chart.
func generated(t *testing.T, rel string) []*unstructured.Unstructured {
	t.Helper()
	path := filepath.Join(chartDir, rel)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s (run 'make generate'): %v", path, err)
	}
	objs := decodeDocs(t, path, data)
	if len(objs) == 0 {
		t.Fatalf("%s holds no objects", path)
	}
	return objs
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func ofKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("rendered manifests have no %s %q; have %v", kind, name, ids(objs))
	return nil
}

func ids(objs []*unstructured.Unstructured) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	sort.Strings(out)
	return out
}

// typed converts an object into its API type, rejecting unknown fields.
func typed(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, into, true); err != nil {
		t.Fatalf("%s/%s does not decode strictly into %T: %v", o.GetKind(), o.GetName(), into, err)
	}
}

func nestedString(t *testing.T, o *unstructured.Unstructured, fields ...string) string {
	t.Helper()
	s, found, err := unstructured.NestedString(o.Object, fields...)
	if err != nil || !found {
		t.Fatalf("%s/%s: %s not a string (found=%v, err=%v)", o.GetKind(), o.GetName(), strings.Join(fields, "."), found, err)
	}
	return s
}

func deployment(t *testing.T, objs []*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	typed(t, find(t, objs, "Deployment", managerName), &d)
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("Deployment has %d containers, want 1", n)
	}
	return &d
}

// deref formats an optional API field for a failure message.
func deref[T any](p *T) string {
	if p == nil {
		return "<unset>"
	}
	return fmt.Sprint(*p)
}

func hasWildcard(values []string) bool {
	return slices.ContainsFunc(values, func(s string) bool { return strings.Contains(s, "*") })
}

// ---- lint and metadata ----------------------------------------------------------

func TestLint(t *testing.T) {
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		values string
	}{
		{"defaults", ""},
		{"all-options", `
replicaCount: 3
image: {tag: v9.9.9, digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
imagePullSecrets: [{name: regcred}]
extraArgs: {leader-election-id: other.kubefarm.io}
crds: {install: true, keep: false}
serviceAccount: {create: true, name: kf, annotations: {a: b}}
podAnnotations: {example.com/note: hi}
podLabels: {team: farm}
nodeSelector: {node-role.kubernetes.io/control-plane: ""}
tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
priorityClassName: system-cluster-critical
webhook: {certManager: {issuerRef: {name: corp-ca, kind: ClusterIssuer}}}
metrics: {serviceMonitor: {enabled: true, labels: {release: prom}}}
`},
		{"pxe", pxeValues},
	} {
		t.Run(tc.name, func(t *testing.T) {
			linter := lint.AllWithKubeVersion(chartDir, values(t, tc.values), namespace, kv)
			for _, m := range linter.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("lint: %s", m.Error())
				} else {
					t.Logf("lint: %s", m.Error())
				}
			}
		})
	}
}

func TestChartMetadata(t *testing.T) {
	md := loadChart(t).Metadata
	got := []string{md.APIVersion, md.Name, md.Version, md.AppVersion, md.KubeVersion}
	want := []string{"v2", "kubefarm-operator", "0.1.0", "0.1.0", ">=1.31.0-0"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Chart.yaml apiVersion/name/version/appVersion/kubeVersion = %q, want %q", got, want)
	}
	if !chartutil.IsCompatibleRange(md.KubeVersion, kubeVersion) {
		t.Errorf("kubeVersion %q rejects %s, the version the tests render for", md.KubeVersion, kubeVersion)
	}
	if chartutil.IsCompatibleRange(md.KubeVersion, "v1.30.9") {
		t.Errorf("kubeVersion %q accepts v1.30.9", md.KubeVersion)
	}
}

// ---- rendered objects ------------------------------------------------------------

func TestRenderDefaults(t *testing.T) {
	objs := renderObjects(t, nil)

	var want []string
	for _, crd := range generatedCRDs(t) {
		want = append(want, "CustomResourceDefinition/"+crd.GetName())
	}
	want = append(want,
		"Certificate/kubefarm-ca",
		"Certificate/kubefarm-webhook",
		"ClusterRole/"+managerName,
		"ClusterRoleBinding/"+managerName,
		"Deployment/"+managerName,
		"Issuer/kubefarm-ca",
		"Issuer/kubefarm-selfsigned",
		"PodDisruptionBudget/"+managerName,
		"Role/"+leaderElection,
		"RoleBinding/"+leaderElection,
		"Service/"+metricsSvcName,
		"Service/"+webhookSvcName,
		"ServiceAccount/"+managerName,
		"ValidatingWebhookConfiguration/"+webhookCfgName,
	)
	sort.Strings(want)
	if got := ids(objs); !reflect.DeepEqual(got, want) {
		t.Fatalf("rendered objects:\n  got  %v\n  want %v", got, want)
	}

	clusterScoped := map[string]bool{
		"CustomResourceDefinition": true, "ClusterRole": true, "ClusterRoleBinding": true,
		"ValidatingWebhookConfiguration": true, "MutatingWebhookConfiguration": true,
	}
	for _, o := range objs {
		id := o.GetKind() + "/" + o.GetName()
		if clusterScoped[o.GetKind()] {
			if o.GetNamespace() != "" {
				t.Errorf("%s is cluster-scoped but has namespace %q", id, o.GetNamespace())
			}
		} else if o.GetNamespace() != namespace {
			t.Errorf("%s: namespace %q, want %q", id, o.GetNamespace(), namespace)
		}
		l := o.GetLabels()
		for k, v := range map[string]string{
			"app.kubernetes.io/name":       "kubefarm",
			"app.kubernetes.io/instance":   release,
			"app.kubernetes.io/managed-by": "Helm",
			"app.kubernetes.io/version":    "0.1.0",
			"app.kubernetes.io/part-of":    "kubefarm",
			"helm.sh/chart":                "kubefarm-operator-0.1.0",
		} {
			if l[k] != v {
				t.Errorf("%s: label %s=%q, want %q", id, k, l[k], v)
			}
		}
	}

	// Every object of a built-in kind must be a valid object of that kind.
	builtin := map[string]func() any{
		"Deployment":                     func() any { return &appsv1.Deployment{} },
		"Service":                        func() any { return &corev1.Service{} },
		"ServiceAccount":                 func() any { return &corev1.ServiceAccount{} },
		"PodDisruptionBudget":            func() any { return &policyv1.PodDisruptionBudget{} },
		"ClusterRole":                    func() any { return &rbacv1.ClusterRole{} },
		"ClusterRoleBinding":             func() any { return &rbacv1.ClusterRoleBinding{} },
		"Role":                           func() any { return &rbacv1.Role{} },
		"RoleBinding":                    func() any { return &rbacv1.RoleBinding{} },
		"ValidatingWebhookConfiguration": func() any { return &admissionregistrationv1.ValidatingWebhookConfiguration{} },
	}
	for _, o := range objs {
		if mk, ok := builtin[o.GetKind()]; ok {
			typed(t, o, mk())
		}
	}

	var sa corev1.ServiceAccount
	typed(t, find(t, objs, "ServiceAccount", managerName), &sa)
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("ServiceAccount automountServiceAccountToken = %s, want false (the pod opts in)", deref(sa.AutomountServiceAccountToken))
	}
}

func TestDeployment(t *testing.T) {
	objs := renderObjects(t, nil)
	d := deployment(t, objs)
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]

	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %s, want 2", deref(d.Spec.Replicas))
	}
	wantArgs := []string{
		"--leader-elect=true",
		"--leader-election-namespace=" + namespace,
		"--metrics-bind-address=:8080",
		"--health-probe-bind-address=:8081",
		"--webhook-port=9443",
		"--webhook-cert-dir=" + certDir,
		"--zap-log-level=info",
		// The etcd backups and restores run kubefarm-etcd from this image.
		"--etcd-tools-image=ghcr.io/kubefarm/kubefarm-manager:0.1.0",
	}
	if !reflect.DeepEqual(c.Args, wantArgs) {
		t.Errorf("args:\n  got  %q\n  want %q", c.Args, wantArgs)
	}
	if c.Image != "ghcr.io/kubefarm/kubefarm-manager:0.1.0" || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image %q pull policy %q, want ghcr.io/kubefarm/kubefarm-manager:0.1.0 IfNotPresent", c.Image, c.ImagePullPolicy)
	}

	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if want := map[string]int32{"metrics": 8080, "health": 8081, "webhook": 9443}; !reflect.DeepEqual(ports, want) {
		t.Errorf("ports = %v, want %v", ports, want)
	}
	for name, probe := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != name || probe.HTTPGet.Port.String() != "health" {
			t.Errorf("probe %s: got %+v, want HTTP GET %s on port health", name, probe, name)
		}
	}

	// The webhook certificate Secret is mounted read-only at the cert dir,
	// and it is the Secret the rendered serving Certificate writes.
	var mounted string
	for _, m := range c.VolumeMounts {
		if m.MountPath == certDir {
			if !m.ReadOnly {
				t.Errorf("volume %s at %s is writable", m.Name, certDir)
			}
			for _, v := range pod.Volumes {
				if v.Name == m.Name && v.Secret != nil {
					mounted = v.Secret.SecretName
				}
			}
		}
	}
	if secret := nestedString(t, find(t, objs, "Certificate", "kubefarm-webhook"), "spec", "secretName"); mounted == "" || mounted != secret {
		t.Errorf("Secret mounted at %s = %q, want the webhook Certificate's secret %q", certDir, mounted, secret)
	}

	// Secure defaults.
	sc, psc := c.SecurityContext, pod.SecurityContext
	if sc == nil || psc == nil {
		t.Fatalf("container or pod securityContext missing")
	}
	if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("runAsNonRoot not set on pod and container")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("readOnlyRootFilesystem not true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("allowPrivilegeEscalation not false")
	}
	if sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("capabilities = %+v, want drop [ALL] and nothing added", sc.Capabilities)
	}
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod seccompProfile = %+v, want RuntimeDefault", psc.SeccompProfile)
	}
	if pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
		t.Errorf("pod automountServiceAccountToken must be true: the manager calls the API")
	}
	if pod.ServiceAccountName != managerName {
		t.Errorf("serviceAccountName = %q, want %q", pod.ServiceAccountName, managerName)
	}
	for _, res := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
		if res.Cpu().IsZero() || res.Memory().IsZero() {
			t.Errorf("resources %v: want cpu and memory in both requests and limits", c.Resources)
		}
	}

	// Soft anti-affinity across hostnames, selecting this Deployment's pods.
	aff := pod.Affinity
	if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 0 ||
		len(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Fatalf("affinity = %+v, want one preferred pod anti-affinity term", aff)
	}
	term := aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
	if term.TopologyKey != "kubernetes.io/hostname" || term.LabelSelector == nil ||
		!reflect.DeepEqual(term.LabelSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("anti-affinity term = %+v, want hostname topology over the Deployment's selector", term)
	}

	// The pods carry the selector labels; Services and the PDB select them.
	sel := d.Spec.Selector.MatchLabels
	for k, v := range sel {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("pod template label %s=%q, selector wants %q", k, d.Spec.Template.Labels[k], v)
		}
	}
	for _, name := range []string{webhookSvcName, metricsSvcName} {
		var svc corev1.Service
		typed(t, find(t, objs, "Service", name), &svc)
		if !reflect.DeepEqual(svc.Spec.Selector, sel) {
			t.Errorf("Service %s selector = %v, want %v", name, svc.Spec.Selector, sel)
		}
	}
	var pdb policyv1.PodDisruptionBudget
	typed(t, find(t, objs, "PodDisruptionBudget", managerName), &pdb)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.String() != "1" || pdb.Spec.MinAvailable != nil ||
		pdb.Spec.Selector == nil || !reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, sel) {
		t.Errorf("PDB spec = %+v, want maxUnavailable 1 over the Deployment's selector", pdb.Spec)
	}
}

func TestDeploymentValues(t *testing.T) {
	objs := renderObjects(t, values(t, `
replicaCount: 3
logLevel: debug
image:
  repository: registry.example/kf/manager
  tag: v1.2.3
  digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
  pullPolicy: Always
imagePullSecrets: [{name: regcred}]
extraArgs:
  leader-election-id: other.kubefarm.io
  graceful-shutdown-timeout: 1m
  a-number: 3
  a-bool: false
podLabels: {team: farm, app.kubernetes.io/component: hijack}
podAnnotations: {example.com/note: hi}
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Equal, value: farm, effect: NoSchedule}]
affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]}]}}}
priorityClassName: farm-critical
podDisruptionBudget: {enabled: false}
`))
	d := deployment(t, objs)
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if *d.Spec.Replicas != 3 {
		t.Errorf("replicas = %d, want 3", *d.Spec.Replicas)
	}
	if want := "registry.example/kf/manager:v1.2.3@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"; c.Image != want {
		t.Errorf("image = %q, want %q", c.Image, want)
	}
	if c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("pullPolicy = %q", c.ImagePullPolicy)
	}
	// extraArgs follow the chart's flags, sorted by name.
	wantTail := []string{"--zap-log-level=debug",
		"--etcd-tools-image=registry.example/kf/manager:v1.2.3@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"--a-bool=false", "--a-number=3",
		"--graceful-shutdown-timeout=1m", "--leader-election-id=other.kubefarm.io"}
	if len(c.Args) < len(wantTail) || !reflect.DeepEqual(c.Args[len(c.Args)-len(wantTail):], wantTail) {
		t.Errorf("args = %q, want them to end with %q", c.Args, wantTail)
	}
	if got := d.Spec.Template.Labels; got["team"] != "farm" || got["app.kubernetes.io/component"] != "manager" {
		t.Errorf("pod labels = %v, want podLabels added without overriding the selector labels", got)
	}
	if d.Spec.Template.Annotations["example.com/note"] != "hi" {
		t.Errorf("pod annotations = %v", d.Spec.Template.Annotations)
	}
	if len(pod.ImagePullSecrets) != 1 || pod.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("imagePullSecrets = %v", pod.ImagePullSecrets)
	}
	if pod.NodeSelector["kubernetes.io/os"] != "linux" || len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "dedicated" {
		t.Errorf("nodeSelector %v tolerations %v", pod.NodeSelector, pod.Tolerations)
	}
	if pod.Affinity == nil || pod.Affinity.NodeAffinity == nil || pod.Affinity.PodAntiAffinity != nil {
		t.Errorf("affinity = %+v, want the given affinity replacing the default", pod.Affinity)
	}
	if pod.PriorityClassName != "farm-critical" {
		t.Errorf("priorityClassName = %q", pod.PriorityClassName)
	}
	if pdbs := ofKind(objs, "PodDisruptionBudget"); len(pdbs) != 0 {
		t.Errorf("podDisruptionBudget.enabled=false still renders %v", ids(pdbs))
	}
}

// TestShutdownDelay: a stopping manager serves on for shutdownDelaySeconds
// (a preStop sleep) before SIGTERM, so its fail-closed webhooks refuse
// nothing while the Service stops sending to it; 0 turns it off, and a
// grace period that the delay would eat is refused, naming both values.
func TestShutdownDelay(t *testing.T) {
	sleep := func(vals map[string]any) *corev1.SleepAction {
		t.Helper()
		c := deployment(t, renderObjects(t, vals)).Spec.Template.Spec.Containers[0]
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
			return nil
		}
		return c.Lifecycle.PreStop.Sleep
	}
	if s := sleep(nil); s == nil || s.Seconds != 5 {
		t.Errorf("default preStop sleep = %+v, want 5 seconds", s)
	}
	if s := sleep(values(t, "shutdownDelaySeconds: 12\nterminationGracePeriodSeconds: 60")); s == nil || s.Seconds != 12 {
		t.Errorf("preStop sleep = %+v, want 12 seconds", s)
	}
	if s := sleep(values(t, "shutdownDelaySeconds: 0")); s != nil {
		t.Errorf("shutdownDelaySeconds 0 still renders a preStop sleep %+v", s)
	}
	_, err := tryRender(t, values(t, "shutdownDelaySeconds: 30\nterminationGracePeriodSeconds: 30"))
	if err == nil || !strings.Contains(err.Error(), "terminationGracePeriodSeconds (30) must be above shutdownDelaySeconds (30)") {
		t.Errorf("a grace period the delay eats: err = %v, want it refused naming both values", err)
	}
}

// TestAlertSources: alertSources become one --alert-source each, sorted
// by name; the schema refuses a bad name and credentials in a URL.
func TestAlertSources(t *testing.T) {
	d := deployment(t, renderObjects(t, values(t, `
alertSources:
  thanos: https://thanos.example.com/prom
  prod: http://prometheus-operated.monitoring.svc:9090
`)))
	var got []string
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--alert-source=") {
			got = append(got, a)
		}
	}
	want := []string{"--alert-source=prod=http://prometheus-operated.monitoring.svc:9090", "--alert-source=thanos=https://thanos.example.com/prom"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("alert sources %q, want %q", got, want)
	}
	for _, bad := range []string{"alertSources: {Prod: http://p:9090}", "alertSources: {prod: http://user:pw@p:9090}", "alertSources: {prod: p:9090}"} {
		if _, err := tryRender(t, values(t, bad)); err == nil || !strings.Contains(err.Error(), "alertSources") {
			t.Errorf("values %q: %v, want a schema error naming alertSources", bad, err)
		}
	}
}

// TestAlertSourceCredentials: a source's Secret is mounted read-only under
// /etc/kubefarm/alert-sources/<name> and named by --alert-source-auth; a
// Secret for a source that does not exist is refused, naming it.
func TestAlertSourceCredentials(t *testing.T) {
	d := deployment(t, renderObjects(t, values(t, `
alertSources:
  prod: https://prometheus.monitoring.svc:9091
  thanos: https://thanos.example.com/prom
alertSourceCredentials:
  prod: prometheus-reader
`)))
	spec := d.Spec.Template.Spec
	var got []string
	for _, a := range spec.Containers[0].Args {
		if strings.HasPrefix(a, "--alert-source-auth") {
			got = append(got, a)
		}
	}
	if want := []string{"--alert-source-auth=prod=/etc/kubefarm/alert-sources/prod"}; !reflect.DeepEqual(got, want) {
		t.Errorf("args %q, want %q", got, want)
	}
	var vol string
	for _, v := range spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "prometheus-reader" {
			vol = v.Name
		}
	}
	mounted := false
	for _, m := range spec.Containers[0].VolumeMounts {
		mounted = mounted || (m.Name == vol && m.MountPath == "/etc/kubefarm/alert-sources/prod" && m.ReadOnly)
	}
	if vol == "" || !mounted || len(vol) > 63 {
		t.Errorf("the Secret prometheus-reader is not mounted read-only at /etc/kubefarm/alert-sources/prod: volumes %+v, mounts %+v",
			spec.Volumes, spec.Containers[0].VolumeMounts)
	}
	_, err := tryRender(t, values(t, "alertSources: {prod: https://p:9090}\nalertSourceCredentials: {other: s}"))
	if err == nil || !strings.Contains(err.Error(), "alertSourceCredentials.other: no alertSources entry is named other") {
		t.Errorf("credentials of an unknown source: %v", err)
	}
}

func TestExtraArgsCannotOverrideChartFlags(t *testing.T) {
	for _, flag := range []string{"leader-elect", "leader-election-namespace", "webhook-cert-dir", "zap-log-level", "metrics-bind-address"} {
		_, err := tryRender(t, map[string]any{"extraArgs": map[string]any{flag: "x"}})
		if err == nil || !strings.Contains(err.Error(), "extraArgs."+flag) {
			t.Errorf("extraArgs.%s: got error %v, want one naming extraArgs.%s", flag, err, flag)
		}
	}
}

// ---- RBAC ---------------------------------------------------------------------------

func TestClusterRoleRulesAreGenerated(t *testing.T) {
	gen := generated(t, "files/rbac/role.yaml")
	if len(gen) != 1 || gen[0].GetKind() != "ClusterRole" {
		t.Fatalf("files/rbac/role.yaml: got %v, want one ClusterRole", ids(gen))
	}
	wantRules, found, err := unstructured.NestedSlice(gen[0].Object, "rules")
	if err != nil || !found || len(wantRules) == 0 {
		t.Fatalf("files/rbac/role.yaml has no rules (err=%v)", err)
	}

	objs := renderObjects(t, nil)
	role := find(t, objs, "ClusterRole", managerName)
	gotRules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	if !reflect.DeepEqual(gotRules, wantRules) {
		t.Errorf("ClusterRole rules differ from files/rbac/role.yaml:\n  got  %v\n  want %v", gotRules, wantRules)
	}

	var crb rbacv1.ClusterRoleBinding
	typed(t, find(t, objs, "ClusterRoleBinding", managerName), &crb)
	wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: managerName, Namespace: namespace}}
	if crb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: managerName}) ||
		!reflect.DeepEqual(crb.Subjects, wantSubjects) {
		t.Errorf("ClusterRoleBinding roleRef %+v subjects %+v", crb.RoleRef, crb.Subjects)
	}
}

func TestLeaderElectionRole(t *testing.T) {
	objs := renderObjects(t, nil)
	var role rbacv1.Role
	typed(t, find(t, objs, "Role", leaderElection), &role)
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("leader election Role rules:\n  got  %+v\n  want %+v", role.Rules, want)
	}
	var rb rbacv1.RoleBinding
	typed(t, find(t, objs, "RoleBinding", leaderElection), &rb)
	if rb.Namespace != namespace || rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != leaderElection ||
		len(rb.Subjects) != 1 || rb.Subjects[0].Name != managerName || rb.Subjects[0].Namespace != namespace {
		t.Errorf("leader election RoleBinding = %+v", rb)
	}
}

func TestNoWildcardRBAC(t *testing.T) {
	for _, vals := range []string{"", "serviceAccount: {create: false, name: preexisting}\nmetrics: {serviceMonitor: {enabled: true}}"} {
		objs := renderObjects(t, values(t, vals))
		var checked int
		for _, o := range objs {
			var rules []rbacv1.PolicyRule
			switch o.GetKind() {
			case "ClusterRole":
				var r rbacv1.ClusterRole
				typed(t, o, &r)
				if r.AggregationRule != nil {
					t.Errorf("ClusterRole %s aggregates other roles", r.Name)
				}
				rules = r.Rules
			case "Role":
				var r rbacv1.Role
				typed(t, o, &r)
				rules = r.Rules
			default:
				continue
			}
			checked++
			if len(rules) == 0 {
				t.Errorf("%s %s has no rules", o.GetKind(), o.GetName())
			}
			for i, r := range rules {
				for field, v := range map[string][]string{"apiGroups": r.APIGroups, "resources": r.Resources, "verbs": r.Verbs,
					"resourceNames": r.ResourceNames, "nonResourceURLs": r.NonResourceURLs} {
					if hasWildcard(v) {
						t.Errorf("%s %s rule %d: %s %q uses a wildcard", o.GetKind(), o.GetName(), i, field, v)
					}
				}
			}
		}
		if checked != 2 {
			t.Errorf("values %q: checked %d roles, want 2 (ClusterRole and leader election Role)", vals, checked)
		}
		if vals != "" {
			if sas := ofKind(objs, "ServiceAccount"); len(sas) != 0 {
				t.Errorf("serviceAccount.create=false still renders %v", ids(sas))
			}
			var crb rbacv1.ClusterRoleBinding
			typed(t, find(t, objs, "ClusterRoleBinding", managerName), &crb)
			if crb.Subjects[0].Name != "preexisting" {
				t.Errorf("ClusterRoleBinding subject = %q, want the given ServiceAccount", crb.Subjects[0].Name)
			}
		}
	}
}

// ---- webhook ------------------------------------------------------------------------

func TestWebhookConfiguration(t *testing.T) {
	gen := generated(t, "files/webhook/manifests.yaml")
	var genVWC admissionregistrationv1.ValidatingWebhookConfiguration
	typed(t, find(t, gen, "ValidatingWebhookConfiguration", "validating-webhook-configuration"), &genVWC)

	objs := renderObjects(t, nil)
	vwcObj := find(t, objs, "ValidatingWebhookConfiguration", webhookCfgName)
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	typed(t, vwcObj, &vwc)

	if len(vwc.Webhooks) != len(genVWC.Webhooks) || len(vwc.Webhooks) == 0 {
		t.Fatalf("rendered %d webhooks, files/webhook/manifests.yaml has %d", len(vwc.Webhooks), len(genVWC.Webhooks))
	}
	for i, wh := range vwc.Webhooks {
		g := genVWC.Webhooks[i]
		if wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("webhook %s failurePolicy = %s, want Fail", wh.Name, deref(wh.FailurePolicy))
		}
		svc := wh.ClientConfig.Service
		if svc == nil || svc.Name != webhookSvcName || svc.Namespace != namespace {
			t.Fatalf("webhook %s service = %+v, want %s/%s", wh.Name, svc, namespace, webhookSvcName)
		}
		if svc.Path == nil || g.ClientConfig.Service.Path == nil || *svc.Path != *g.ClientConfig.Service.Path {
			t.Errorf("webhook %s path = %v, want the generated %v", wh.Name, svc.Path, g.ClientConfig.Service.Path)
		}
		if svc.Port != nil && *svc.Port != 443 {
			t.Errorf("webhook %s port = %d, want 443", wh.Name, *svc.Port)
		}
		// Everything but the service reference comes from the code markers.
		wh.ClientConfig.Service, g.ClientConfig.Service = nil, nil
		if !reflect.DeepEqual(wh, g) {
			t.Errorf("webhook %s differs from files/webhook/manifests.yaml:\n  got  %+v\n  want %+v", wh.Name, wh, g)
		}
	}
	for _, want := range []string{"nodepool-addresses.kubefarm.io", "machine-addresses.kubefarm.io"} {
		if !slices.ContainsFunc(vwc.Webhooks, func(wh admissionregistrationv1.ValidatingWebhook) bool { return wh.Name == want }) {
			t.Errorf("no webhook %s among the rendered ones", want)
		}
	}

	// cert-manager injects the CA of the Certificate the annotation names,
	// whose Secret the manager serves with, for the Service the webhook calls.
	inject := vwc.Annotations["cert-manager.io/inject-ca-from"]
	certNS, certName, _ := strings.Cut(inject, "/")
	if certNS != namespace {
		t.Fatalf("inject-ca-from = %q, want a Certificate in %s", inject, namespace)
	}
	cert := find(t, objs, "Certificate", certName)
	dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	wantDNS := []string{webhookSvcName + "." + namespace + ".svc", webhookSvcName + "." + namespace + ".svc.cluster.local"}
	if !reflect.DeepEqual(dns, wantDNS) {
		t.Errorf("Certificate %s dnsNames = %v, want %v", certName, dns, wantDNS)
	}
	var svc corev1.Service
	typed(t, find(t, objs, "Service", webhookSvcName), &svc)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.String() != "webhook" {
		t.Errorf("webhook Service ports = %+v, want 443 -> webhook", svc.Spec.Ports)
	}

	// Default issuers: self-signed -> CA certificate -> CA issuer -> serving certificate.
	if ref := nestedString(t, cert, "spec", "issuerRef", "name"); ref != "kubefarm-ca" {
		t.Errorf("serving Certificate issuer = %q, want kubefarm-ca", ref)
	}
	ca := find(t, objs, "Certificate", "kubefarm-ca")
	if isCA, _, _ := unstructured.NestedBool(ca.Object, "spec", "isCA"); !isCA {
		t.Errorf("Certificate kubefarm-ca is not a CA")
	}
	if ref := nestedString(t, ca, "spec", "issuerRef", "name"); ref != "kubefarm-selfsigned" {
		t.Errorf("CA Certificate issuer = %q, want kubefarm-selfsigned", ref)
	}
	if s := nestedString(t, find(t, objs, "Issuer", "kubefarm-ca"), "spec", "ca", "secretName"); s != nestedString(t, ca, "spec", "secretName") {
		t.Errorf("CA Issuer reads Secret %q, CA Certificate writes %q", s, nestedString(t, ca, "spec", "secretName"))
	}
	if _, found, _ := unstructured.NestedMap(find(t, objs, "Issuer", "kubefarm-selfsigned").Object, "spec", "selfSigned"); !found {
		t.Errorf("Issuer kubefarm-selfsigned is not self-signed")
	}
}

func TestWebhookUserIssuer(t *testing.T) {
	objs := renderObjects(t, values(t, "webhook: {certManager: {issuerRef: {name: corp-ca, kind: ClusterIssuer}}}"))
	if issuers := ofKind(objs, "Issuer"); len(issuers) != 0 {
		t.Errorf("with issuerRef the chart still creates %v", ids(issuers))
	}
	certs := ofKind(objs, "Certificate")
	if len(certs) != 1 || certs[0].GetName() != "kubefarm-webhook" {
		t.Fatalf("Certificates = %v, want only kubefarm-webhook", ids(certs))
	}
	ref, _, _ := unstructured.NestedStringMap(certs[0].Object, "spec", "issuerRef")
	if want := map[string]string{"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}; !reflect.DeepEqual(ref, want) {
		t.Errorf("issuerRef = %v, want %v", ref, want)
	}
}

// ---- CRDs ---------------------------------------------------------------------------

func generatedCRDs(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(chartDir, "files", "crds", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no CRDs in %s/files/crds (run 'make generate'): %v", chartDir, err)
	}
	var crds []*unstructured.Unstructured
	for _, p := range paths {
		rel, _ := filepath.Rel(chartDir, p)
		crds = append(crds, generated(t, rel)...)
	}
	return crds
}

func TestCRDs(t *testing.T) {
	gen := generatedCRDs(t)
	if len(gen) != 7 {
		t.Errorf("files/crds holds %d CRDs, want 7 (tenantclusters, nodepools, machines, bootimages, dhcpleases, addressclaims, discoveredmachines)", len(gen))
	}
	for _, tc := range []struct {
		values string
		keep   bool
	}{{"", true}, {"crds: {keep: false}", false}} {
		objs := renderObjects(t, values(t, tc.values))
		if n := len(ofKind(objs, "CustomResourceDefinition")); n != len(gen) {
			t.Errorf("values %q: rendered %d CRDs, files/crds has %d", tc.values, n, len(gen))
		}
		for _, g := range gen {
			if g.GetKind() != "CustomResourceDefinition" {
				t.Fatalf("files/crds holds a %s", g.GetKind())
			}
			if group, _, _ := unstructured.NestedString(g.Object, "spec", "group"); group != "kubefarm.io" {
				t.Errorf("CRD %s group = %q, want kubefarm.io", g.GetName(), group)
			}
			r := find(t, objs, "CustomResourceDefinition", g.GetName())
			if !reflect.DeepEqual(r.Object["spec"], g.Object["spec"]) {
				t.Errorf("CRD %s: rendered spec differs from files/crds", g.GetName())
			}
			for k, v := range g.GetAnnotations() {
				if r.GetAnnotations()[k] != v {
					t.Errorf("CRD %s lost annotation %s=%q", g.GetName(), k, v)
				}
			}
			policy, has := r.GetAnnotations()["helm.sh/resource-policy"]
			if tc.keep && policy != "keep" {
				t.Errorf("CRD %s: helm.sh/resource-policy = %q, want keep", g.GetName(), policy)
			}
			if !tc.keep && has {
				t.Errorf("crds.keep=false: CRD %s still has helm.sh/resource-policy=%q", g.GetName(), policy)
			}
		}
	}

	objs := renderObjects(t, values(t, "crds: {install: false}"))
	if crds := ofKind(objs, "CustomResourceDefinition"); len(crds) != 0 {
		t.Errorf("crds.install=false still renders %v", ids(crds))
	}
	find(t, objs, "Deployment", managerName) // the rest still renders
}

// ---- values schema ------------------------------------------------------------------

func TestSchemaRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		name, values, field string
	}{
		{"zero replicas", "replicaCount: 0", "replicaCount"},
		{"replicas as a word", "replicaCount: two", "replicaCount"},
		{"fractional replicas", "replicaCount: 1.5", "replicaCount"},
		{"unknown top-level key", "replicas: 2", "replicas"},
		{"unknown nested key", "image: {registry: x}", "registry"},
		{"pull policy", "image: {pullPolicy: Sometimes}", "pullPolicy"},
		{"bad digest", "image: {digest: latest}", "digest"},
		{"log level", "logLevel: loud", "logLevel"},
		{"crds.install not a bool", "crds: {install: yes-please}", "install"},
		{"extraArgs with dashes", "extraArgs: {--foo: bar}", "extraArgs"},
		{"extraArgs nested", "extraArgs: {foo: {bar: baz}}", "extraArgs"},
		{"issuerRef without name", "webhook: {certManager: {issuerRef: {kind: ClusterIssuer}}}", "issuerRef"},
		{"issuerRef kind", "webhook: {certManager: {issuerRef: {name: x, kind: Vault}}}", "kind"},
		{"pdb zero", "podDisruptionBudget: {maxUnavailable: 0}", "maxUnavailable"},
		{"cert duration", "webhook: {certManager: {duration: 90 days}}", "duration"},
		{"security context typo", "securityContext: {readOnlyRootFileSystem: true}", "readOnlyRootFileSystem"},
		{"label value not a string", "podLabels: {team: 3}", "team"},
		{"toleration operator", "tolerations: [{key: a, operator: Maybe}]", "operator"},
		{"shutdown delay past a minute", "shutdownDelaySeconds: 61", "shutdownDelaySeconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tryRender(t, values(t, tc.values))
			if err == nil {
				t.Fatalf("values %q were accepted", tc.values)
			}
			if msg := err.Error(); !strings.Contains(msg, "values don't meet the specifications of the schema") ||
				!strings.Contains(msg, tc.field) {
				t.Errorf("values %q: error does not name %q as a schema violation:\n%v", tc.values, tc.field, err)
			}
		})
	}
}

func TestSchemaAcceptsValidValues(t *testing.T) {
	for _, v := range []string{
		"",
		"replicaCount: 1",
		"podDisruptionBudget: {maxUnavailable: 50%}",
		"resources: {requests: {cpu: 1, memory: 1Gi, ephemeral-storage: 100Mi}, limits: {memory: 2Gi}}",
		"webhook: {certManager: {issuerRef: {name: corp, kind: Issuer, group: cert-manager.io}, duration: 720h, renewBefore: 24h30m}}",
		"extraArgs: {graceful-shutdown-timeout: 45s, leader-election-lease-duration: 20s}",
		"logLevel: error\nimage: {pullPolicy: Never}",
	} {
		if _, err := tryRender(t, values(t, v)); err != nil {
			t.Errorf("values %q rejected: %v", v, err)
		}
	}
}

// ---- determinism --------------------------------------------------------------------

// manifest joins the rendered files in template file name order, as `helm
// template` prints them.
func manifest(files map[string]string) string {
	var b strings.Builder
	for _, name := range sortedKeys(files) {
		fmt.Fprintf(&b, "# Source: %s\n%s\n", name, files[name])
	}
	return b.String()
}

func TestDeterministicRender(t *testing.T) {
	// Maps with several keys, so that any map-order dependence shows.
	vals := `
extraArgs: {z-flag: "1", a-flag: "2", m-flag: "3"}
podLabels: {z: "1", a: "2", m: "3"}
podAnnotations: {z: "1", a: "2", m: "3"}
nodeSelector: {z: "1", a: "2", m: "3"}
metrics: {serviceMonitor: {enabled: true, labels: {z: "1", a: "2"}}}
pxe: {enabled: true, extraArgs: {z-flag: "1", a-flag: "2"}, nodeSelector: {z: "1", a: "2"}, podLabels: {z: "1", a: "2"}}
`
	first := manifest(render(t, values(t, vals)))
	if !strings.Contains(first, "kind: CustomResourceDefinition") || !strings.Contains(first, "kind: Deployment") {
		t.Fatalf("manifest lacks CRDs or the Deployment:\n%s", first)
	}
	for i := range 3 {
		again := manifest(render(t, values(t, vals)))
		if again != first {
			a, b := strings.Split(first, "\n"), strings.Split(again, "\n")
			for j := 0; j < len(a) && j < len(b); j++ {
				if a[j] != b[j] {
					t.Fatalf("render %d differs at line %d:\n  first %q\n  now   %q", i+2, j+1, a[j], b[j])
				}
			}
			t.Fatalf("render %d differs in length: %d vs %d lines", i+2, len(a), len(b))
		}
	}
}

// ---- metrics ------------------------------------------------------------------------

func TestMetrics(t *testing.T) {
	objs := renderObjects(t, nil)
	if sms := ofKind(objs, "ServiceMonitor"); len(sms) != 0 {
		t.Errorf("ServiceMonitor rendered by default: %v", ids(sms))
	}

	objs = renderObjects(t, values(t, "metrics: {serviceMonitor: {enabled: true, interval: 15s, labels: {release: prom}}}"))
	var svc corev1.Service
	typed(t, find(t, objs, "Service", metricsSvcName), &svc)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "metrics" || svc.Spec.Ports[0].Port != 8080 ||
		svc.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("metrics Service ports = %+v, want metrics 8080 -> metrics", svc.Spec.Ports)
	}

	sm := find(t, objs, "ServiceMonitor", managerName)
	if sm.GetLabels()["release"] != "prom" {
		t.Errorf("ServiceMonitor labels = %v, want release=prom added", sm.GetLabels())
	}
	match, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	if len(match) == 0 {
		t.Fatalf("ServiceMonitor has no selector")
	}
	// The ServiceMonitor selects the metrics Service and nothing else.
	for _, o := range ofKind(objs, "Service") {
		selected := true
		for k, v := range match {
			if o.GetLabels()[k] != v {
				selected = false
			}
		}
		if selected != (o.GetName() == metricsSvcName) {
			t.Errorf("ServiceMonitor selector %v selects Service %s: %v", match, o.GetName(), selected)
		}
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("ServiceMonitor endpoints = %v", endpoints)
	}
	ep := endpoints[0].(map[string]any)
	if ep["port"] != "metrics" || ep["interval"] != "15s" || ep["path"] != "/metrics" {
		t.Errorf("ServiceMonitor endpoint = %v, want port metrics, path /metrics, interval 15s", ep)
	}
}

// ---- kubefarm-pxe -------------------------------------------------------------------

const pxeName = "kubefarm-pxe"

// pxeValues enables kubefarm-pxe with a value for every flag the chart sets.
const pxeValues = `
pxe:
  enabled: true
  image: {tag: v9.9.9}
  logLevel: debug
  serverIP: 10.10.0.1
  httpAddr: ":8081"
  httpPort: 80
  metricsAddr: "10.20.0.1:9100"
  http: {readHeaderTimeout: 5s, readTimeout: 20s, writeTimeout: 45s, idleTimeout: 90s, maxHeaderBytes: 4096, maxConnsPerIP: 8}
  dhcp: {interface: eth1, mode: proxy, workers: 8, queue: 256}
  tftp: {addr: ":69", timeout: 3s, retries: 7, maxTransfers: 32, maxWindowSize: 4, spinWait: 0s}
  events: {interval: 30s, qps: 0.5, burst: 20}
  ipxe: {dir: /opt/ipxe, uefiBinary: snponly.efi, hostPath: /usr/lib/ipxe}
  cache: {type: emptyDir, sizeLimit: 30Gi}
  artifacts: {maxSize: 8589934592, wait: 90s, insecureRegistry: true, verify: false}
  fetch: {deniedCIDRs: [10.0.0.0/16, "fd00::/8"], allowedCIDRs: [10.0.5.7/32, 127.0.0.1]}
  watchNamespace: farm
  bootWindow: 5m
  joinTokenTTL: 20m
  shutdownTimeout: 20s
  extraArgs: {some-future-flag: x}
  nodeSelector: {kubefarm.io/boot-network: "true"}
  tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: rack, operator: In, values: [a]}]}]}}}
`

func pxeDaemonSet(t *testing.T, objs []*unstructured.Unstructured) *appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	typed(t, find(t, objs, "DaemonSet", pxeName), &ds)
	if n := len(ds.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("DaemonSet has %d containers, want 1", n)
	}
	return &ds
}

func TestPXEDisabledByDefault(t *testing.T) {
	objs := renderObjects(t, nil)
	for _, o := range objs {
		if o.GetLabels()["app.kubernetes.io/component"] == "pxe" || strings.Contains(o.GetName(), "pxe") {
			t.Errorf("pxe.enabled=false renders %s/%s", o.GetKind(), o.GetName())
		}
	}
	for _, a := range deployment(t, objs).Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--pxe-namespace") {
			t.Errorf("manager gets %s while pxe is disabled; its default (or extraArgs) applies", a)
		}
	}
	// The manager's --pxe-namespace stays the operator's when pxe is off.
	if _, err := tryRender(t, map[string]any{"extraArgs": map[string]any{"pxe-namespace": "elsewhere"}}); err != nil {
		t.Errorf("extraArgs.pxe-namespace with pxe disabled: %v", err)
	}
}

func TestPXEDaemonSet(t *testing.T) {
	objs := renderObjects(t, values(t, pxeValues))

	wantIDs := []string{"ClusterRole/" + pxeName, "ClusterRoleBinding/" + pxeName, "DaemonSet/" + pxeName,
		"Role/" + pxeName, "RoleBinding/" + pxeName, "ServiceAccount/" + pxeName}
	var gotIDs []string
	for _, o := range objs {
		if o.GetLabels()["app.kubernetes.io/component"] == "pxe" {
			gotIDs = append(gotIDs, o.GetKind()+"/"+o.GetName())
		}
	}
	sort.Strings(gotIDs)
	if !reflect.DeepEqual(gotIDs, wantIDs) {
		t.Errorf("pxe objects:\n  got  %v\n  want %v", gotIDs, wantIDs)
	}

	ds := pxeDaemonSet(t, objs)
	if ds.Namespace != namespace {
		t.Errorf("DaemonSet namespace %q, want %q", ds.Namespace, namespace)
	}
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	if !pod.HostNetwork {
		t.Errorf("hostNetwork = false; DHCP and TFTP must answer on the node's boot network")
	}
	if pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("dnsPolicy = %q, want ClusterFirstWithHostNet (tenant .svc names)", pod.DNSPolicy)
	}
	if pod.ServiceAccountName != pxeName || pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
		t.Errorf("serviceAccountName %q automount %s, want %s and true", pod.ServiceAccountName, deref(pod.AutomountServiceAccountToken), pxeName)
	}
	if c.Image != "ghcr.io/kubefarm/kubefarm-pxe:v9.9.9" {
		t.Errorf("image = %q", c.Image)
	}
	for k, v := range map[string]string{"kubefarm.io/boot-network": "true"} {
		if pod.NodeSelector[k] != v {
			t.Errorf("nodeSelector = %v", pod.NodeSelector)
		}
	}
	if len(pod.Tolerations) != 1 || pod.Affinity == nil || pod.Affinity.NodeAffinity == nil {
		t.Errorf("tolerations %v affinity %+v not from values", pod.Tolerations, pod.Affinity)
	}

	wantArgs := []string{
		"--server-ip=10.10.0.1",
		"--http-addr=:8081",
		"--http-port=80",
		"--metrics-addr=10.20.0.1:9100",
		"--http-read-header-timeout=5s",
		"--http-read-timeout=20s",
		"--http-write-timeout=45s",
		"--http-idle-timeout=90s",
		"--http-max-header-bytes=4096",
		"--http-max-conns-per-ip=8",
		"--tftp-addr=:69",
		"--tftp-timeout=3s",
		"--tftp-retries=7",
		"--tftp-max-transfers=32",
		"--tftp-max-windowsize=4",
		"--tftp-spin-wait=0s",
		"--event-interval=30s",
		"--event-qps=0.5",
		"--event-burst=20",
		"--interface=eth1",
		"--proxy-dhcp=true", "--answer-router-solicitations=true",
		"--workers=8",
		"--queue=256",
		"--ipxe-dir=/opt/ipxe",
		"--uefi-binary=snponly.efi",
		"--cache-dir=/var/cache/kubefarm-pxe",
		"--max-artifact-size=8589934592",
		"--artifact-wait=90s",
		"--insecure-registry=true",
		"--verify-images=false",
		"--fetch-denied-cidrs=10.0.0.0/16,fd00::/8",
		"--fetch-allowed-cidrs=10.0.5.7/32,127.0.0.1",
		"--namespace=farm",
		"--boot-window=5m",
		"--join-token-ttl=20m",
		"--shutdown-timeout=20s",
		"--zap-log-level=debug",
		"--some-future-flag=x",
	}
	if !reflect.DeepEqual(c.Args, wantArgs) {
		t.Errorf("args:\n  got  %q\n  want %q", c.Args, wantArgs)
	}

	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
			t.Errorf("env %s is not from the downward API", e.Name)
			continue
		}
		env[e.Name] = e.ValueFrom.FieldRef.FieldPath
	}
	if env["POD_NAMESPACE"] != "metadata.namespace" || env["HOST_IP"] != "status.hostIP" {
		t.Errorf("env = %v, want POD_NAMESPACE from metadata.namespace and HOST_IP from status.hostIP", env)
	}

	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatalf("container securityContext = %+v", sc)
	}
	if !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		!reflect.DeepEqual(sc.Capabilities.Add, []corev1.Capability{"NET_BIND_SERVICE", "NET_RAW"}) {
		t.Errorf("capabilities drop %v add %v, want drop ALL, add NET_BIND_SERVICE and NET_RAW only", sc.Capabilities.Drop, sc.Capabilities.Add)
	}
	if sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("privileged %s allowPrivilegeEscalation %s readOnlyRootFilesystem %s, want false false true",
			deref(sc.Privileged), deref(sc.AllowPrivilegeEscalation), deref(sc.ReadOnlyRootFilesystem))
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("seccompProfile = %+v, want RuntimeDefault", sc.SeccompProfile)
	}

	for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
		// On the metrics listener's host and port, never the boot service's.
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "metrics" || p.HTTPGet.Host != "10.20.0.1" {
			t.Errorf("probe = %+v, want GET /healthz on 10.20.0.1, port metrics", p)
		}
	}
	ports := map[string]corev1.ContainerPort{}
	for _, p := range c.Ports {
		ports[p.Name] = p
	}
	for name, want := range map[string]struct {
		port  int32
		proto corev1.Protocol
	}{"http": {8081, "TCP"}, "metrics": {9100, "TCP"}, "tftp": {69, "UDP"}, "dhcp": {67, "UDP"}, "pxe-proxy": {4011, "UDP"}} {
		if p := ports[name]; p.ContainerPort != want.port || p.Protocol != want.proto {
			t.Errorf("port %s = %+v, want %d/%s", name, p, want.port, want.proto)
		}
	}

	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	if m := mounts["cache"]; m.MountPath != "/var/cache/kubefarm-pxe" || m.ReadOnly {
		t.Errorf("cache mount = %+v", m)
	}
	if v := vols["cache"]; v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.String() != "30Gi" {
		t.Errorf("cache volume = %+v, want an emptyDir of 30Gi", v.VolumeSource)
	}
	if m := mounts["ipxe"]; m.MountPath != "/opt/ipxe" || !m.ReadOnly {
		t.Errorf("ipxe mount = %+v, want /opt/ipxe read-only", m)
	}
	if v := vols["ipxe"]; v.HostPath == nil || v.HostPath.Path != "/usr/lib/ipxe" {
		t.Errorf("ipxe volume = %+v, want hostPath /usr/lib/ipxe", v.VolumeSource)
	}

	// The manager writes the credentials where this kubefarm-pxe reads them.
	if args := deployment(t, objs).Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--pxe-namespace="+namespace) {
		t.Errorf("manager args %q lack --pxe-namespace=%s", args, namespace)
	}
}

func TestPXEDefaults(t *testing.T) {
	objs := renderObjects(t, values(t, "pxe: {enabled: true}"))
	ds := pxeDaemonSet(t, objs)
	c := ds.Spec.Template.Spec.Containers[0]
	if c.Image != "ghcr.io/kubefarm/kubefarm-pxe:0.1.0" {
		t.Errorf("image = %q, want the appVersion tag", c.Image)
	}
	for _, want := range []string{
		"--server-ip=$(HOST_IP)", "--http-addr=:8080", "--http-port=0", "--tftp-addr=:69", "--interface=",
		"--proxy-dhcp=false", "--answer-router-solicitations=true", "--ipxe-dir=/usr/lib/ipxe", "--uefi-binary=ipxe.efi",
		"--max-artifact-size=4294967296", "--join-token-ttl=15m", "--namespace=",
		"--event-interval=1m", "--event-qps=5", "--event-burst=50",
		"--metrics-addr=127.0.0.1:9090", "--http-read-header-timeout=10s", "--http-read-timeout=30s",
		"--http-write-timeout=1m", "--http-idle-timeout=2m", "--http-max-header-bytes=8192", "--http-max-conns-per-ip=16",
		"--fetch-denied-cidrs=10.96.0.0/12,10.244.0.0/16", "--fetch-allowed-cidrs=",
	} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("default args %q lack %q", c.Args, want)
		}
	}
	var names []string
	for _, p := range c.Ports {
		names = append(names, p.Name)
	}
	if !reflect.DeepEqual(names, []string{"http", "metrics", "tftp"}) {
		t.Errorf("ports without DHCP = %v, want http, metrics and tftp", names)
	}
	// The kubelet probes a hostNetwork pod from the node's network
	// namespace: the default loopback listener is reachable.
	for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Host != "127.0.0.1" || p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("default probe %+v, want host 127.0.0.1, port metrics", p)
		}
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "ipxe" {
			t.Errorf("ipxe hostPath volume rendered without pxe.ipxe.hostPath")
		}
	}

	// The boot service's host is not probed; a wildcard or $(HOST_IP)
	// metrics host is the pod IP (the node's), so no host is set.
	for _, addr := range []string{":9090", "0.0.0.0:9090", "$(HOST_IP):9090"} {
		ds = pxeDaemonSet(t, renderObjects(t, values(t, "pxe: {enabled: true, httpAddr: '10.0.0.5:8080', metricsAddr: '"+addr+"'}")))
		c := ds.Spec.Template.Spec.Containers[0]
		if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Host != "" || p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("metricsAddr %s: readiness probe %+v, want no host, port metrics", addr, p)
		}
		if !slices.Contains(c.Args, "--metrics-addr="+addr) {
			t.Errorf("metricsAddr %s: args %q", addr, c.Args)
		}
	}
	for _, bad := range []string{"pxe: {enabled: true, metricsAddr: ''}", "pxe: {enabled: true, metricsAddr: '$(POD_IP):9090'}",
		"pxe: {enabled: true, http: {maxHeaderBytes: 100}}", "pxe: {enabled: true, http: {maxConnsPerIP: -1}}",
		"pxe: {enabled: true, http: {writeTimeout: forever}}", "pxe: {enabled: true, http: {other: 1}}"} {
		if _, err := tryRender(t, values(t, bad)); err == nil {
			t.Errorf("%s: rendered, want the schema's refusal", bad)
		}
	}

	objs = renderObjects(t, values(t, `
pxe: {enabled: true, tftp: {enabled: false}, cache: {type: hostPath, hostPath: /srv/pxe}, capabilities: [NET_BIND_SERVICE]}`))
	ds = pxeDaemonSet(t, objs)
	c = ds.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--tftp-addr=") {
		t.Errorf("tftp.enabled=false: args %q lack an empty --tftp-addr", c.Args)
	}
	if got := c.SecurityContext.Capabilities.Add; !reflect.DeepEqual(got, []corev1.Capability{"NET_BIND_SERVICE"}) {
		t.Errorf("capabilities add = %v, want the value's", got)
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "cache" && (v.HostPath == nil || v.HostPath.Path != "/srv/pxe") {
			t.Errorf("cache volume = %+v, want hostPath /srv/pxe", v.VolumeSource)
		}
	}
}

// TestPXEDiscoveryFlags: discovery's flags appear only with
// pxe.discovery.enabled, then with the values; extraArgs cannot set them;
// the schema refuses values that would turn its bounds off.
func TestPXEDiscoveryFlags(t *testing.T) {
	discoveryArgs := func(args []string) []string {
		var out []string
		for _, a := range args {
			if strings.HasPrefix(a, "--discovery") {
				out = append(out, a)
			}
		}
		return out
	}
	c := pxeDaemonSet(t, renderObjects(t, values(t, "pxe: {enabled: true}"))).Spec.Template.Spec.Containers[0]
	if got := discoveryArgs(c.Args); len(got) != 0 {
		t.Errorf("discovery off by default, yet args %q", got)
	}
	c = pxeDaemonSet(t, renderObjects(t, values(t, "pxe: {enabled: true, discovery: {enabled: false, maxMachines: 7}}"))).Spec.Template.Spec.Containers[0]
	if got := discoveryArgs(c.Args); len(got) != 0 {
		t.Errorf("discovery.enabled false, yet args %q", got)
	}
	c = pxeDaemonSet(t, renderObjects(t, values(t, "pxe: {enabled: true, discovery: {enabled: true}}"))).Spec.Template.Spec.Containers[0]
	want := []string{"--discovery=true", "--discovery-max-machines=1000", "--discovery-rate=5", "--discovery-burst=20"}
	if got := discoveryArgs(c.Args); !reflect.DeepEqual(got, want) {
		t.Errorf("discovery on: args %q, want %q", got, want)
	}
	c = pxeDaemonSet(t, renderObjects(t, values(t, "pxe: {enabled: true, discovery: {enabled: true, maxMachines: 50, rate: 0.5, burst: 3}}"))).Spec.Template.Spec.Containers[0]
	want = []string{"--discovery=true", "--discovery-max-machines=50", "--discovery-rate=0.5", "--discovery-burst=3"}
	if got := discoveryArgs(c.Args); !reflect.DeepEqual(got, want) {
		t.Errorf("discovery values: args %q, want %q", got, want)
	}
	// RBAC on DiscoveredMachines only with discovery on (TestPXERBAC: none
	// by default).
	var cr rbacv1.ClusterRole
	typed(t, find(t, renderObjects(t, values(t, "pxe: {enabled: true, discovery: {enabled: true}}")), "ClusterRole", pxeName), &cr)
	wantRule := rbacv1.PolicyRule{APIGroups: []string{"kubefarm.io"}, Resources: []string{"discoveredmachines"}, Verbs: []string{"create", "get", "list", "patch", "watch"}}
	if !slices.ContainsFunc(cr.Rules, func(r rbacv1.PolicyRule) bool { return reflect.DeepEqual(r, wantRule) }) {
		t.Errorf("discovery on: ClusterRole rules %+v lack %+v", cr.Rules, wantRule)
	}
	for _, bad := range []string{
		"pxe: {enabled: true, discovery: {enabled: true, maxMachines: 0}}",
		"pxe: {enabled: true, discovery: {enabled: true, rate: 0}}",
		"pxe: {enabled: true, discovery: {enabled: true, burst: 0}}",
		"pxe: {enabled: true, discovery: {enabled: yes-please}}",
		"pxe: {enabled: true, discovery: {other: 1}}",
		"pxe: {enabled: true, extraArgs: {discovery: true}}",
		"pxe: {enabled: true, extraArgs: {discovery-max-machines: 100000}}",
	} {
		if _, err := tryRender(t, values(t, bad)); err == nil {
			t.Errorf("%s: rendered, want a refusal", bad)
		}
	}
}

func TestPXERBAC(t *testing.T) {
	objs := renderObjects(t, values(t, "pxe: {enabled: true}"))

	var role rbacv1.Role
	typed(t, find(t, objs, "Role", pxeName), &role)
	if role.Namespace != namespace {
		t.Errorf("pxe Role namespace = %q, want the release namespace %q", role.Namespace, namespace)
	}
	wantRole := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}}}
	if !reflect.DeepEqual(role.Rules, wantRole) {
		t.Errorf("pxe Role rules:\n  got  %+v\n  want %+v", role.Rules, wantRole)
	}
	var rb rbacv1.RoleBinding
	typed(t, find(t, objs, "RoleBinding", pxeName), &rb)
	if rb.Namespace != namespace || rb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: pxeName}) ||
		!reflect.DeepEqual(rb.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: pxeName, Namespace: namespace}}) {
		t.Errorf("pxe RoleBinding = %+v", rb)
	}

	var cr rbacv1.ClusterRole
	typed(t, find(t, objs, "ClusterRole", pxeName), &cr)
	wantCluster := []rbacv1.PolicyRule{
		// Events on Machines, through client-go's broadcaster.
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{"kubefarm.io"}, Resources: []string{"bootimages", "machines", "nodepools"}, Verbs: []string{"get", "list", "watch"}},
		// BootImages' conditions (--verify-images) and Machines' boot reports.
		{APIGroups: []string{"kubefarm.io"}, Resources: []string{"bootimages/status", "machines/status"}, Verbs: []string{"patch"}},
		// Leases of the dynamic ranges, shared by the replicas.
		{APIGroups: []string{"kubefarm.io"}, Resources: []string{"dhcpleases"}, Verbs: []string{"create", "delete", "get", "list", "update", "watch"}},
	}
	if !reflect.DeepEqual(cr.Rules, wantCluster) {
		t.Errorf("pxe ClusterRole rules:\n  got  %+v\n  want %+v", cr.Rules, wantCluster)
	}
	for i, r := range cr.Rules {
		if slices.Contains(r.Resources, "secrets") {
			t.Errorf("pxe ClusterRole rule %d grants secrets", i)
		}
		for _, v := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.ResourceNames, r.NonResourceURLs} {
			if hasWildcard(v) {
				t.Errorf("pxe ClusterRole rule %d uses a wildcard: %v", i, v)
			}
		}
	}
	var crb rbacv1.ClusterRoleBinding
	typed(t, find(t, objs, "ClusterRoleBinding", pxeName), &crb)
	if crb.RoleRef.Name != pxeName || !reflect.DeepEqual(crb.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: pxeName, Namespace: namespace}}) {
		t.Errorf("pxe ClusterRoleBinding = %+v", crb)
	}

	// The rendered rules are the generated ones, all of them with
	// discovery on (off, its rule is left out: wantCluster above).
	full := renderObjects(t, values(t, "pxe: {enabled: true, discovery: {enabled: true}}"))
	gen := generated(t, "files/rbac/pxe-role.yaml")
	for _, g := range gen {
		rules, _, _ := unstructured.NestedSlice(g.Object, "rules")
		rendered := find(t, full, g.GetKind(), pxeName)
		got, _, _ := unstructured.NestedSlice(rendered.Object, "rules")
		if !reflect.DeepEqual(got, rules) {
			t.Errorf("%s rules differ from files/rbac/pxe-role.yaml:\n  got  %v\n  want %v", g.GetKind(), got, rules)
		}
	}

	var sa corev1.ServiceAccount
	typed(t, find(t, objs, "ServiceAccount", pxeName), &sa)
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("pxe ServiceAccount automountServiceAccountToken = %s, want false", deref(sa.AutomountServiceAccountToken))
	}
}

func TestPXEValuesRejected(t *testing.T) {
	for _, tc := range []struct{ name, values, want string }{
		{"mode", "pxe: {enabled: true, dhcp: {mode: relay}}", "mode"},
		{"capability", "pxe: {enabled: true, capabilities: [NET_ADMIN]}", "capabilities"},
		{"server ip", "pxe: {enabled: true, serverIP: boot.example.com}", "serverIP"},
		{"http addr without port", "pxe: {enabled: true, httpAddr: \"0.0.0.0\"}", "httpAddr"},
		{"cache type", "pxe: {enabled: true, cache: {type: pvc}}", "type"},
		{"duration", "pxe: {enabled: true, joinTokenTTL: 1 day}", "joinTokenTTL"},
		{"unknown key", "pxe: {enabled: true, hostNetwork: false}", "hostNetwork"},
		{"event qps", "pxe: {enabled: true, events: {qps: 0}}", "qps"},
		{"event burst", "pxe: {enabled: true, events: {burst: 0}}", "burst"},
		{"event interval", "pxe: {enabled: true, events: {interval: 0}}", "interval"},
		{"fetch cidr", "pxe: {enabled: true, fetch: {deniedCIDRs: [cluster.local]}}", "deniedCIDRs"},
		{"fetch cidr list", "pxe: {enabled: true, fetch: {allowedCIDRs: 10.0.0.0/8}}", "allowedCIDRs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tryRender(t, values(t, tc.values))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("values %q: error %v, want one naming %q", tc.values, err, tc.want)
			}
		})
	}
	for _, flag := range []string{"server-ip", "pod-namespace", "interface", "dhcp-listen", "proxy-dhcp", "cache-dir", "event-qps", "fetch-denied-cidrs", "fetch-allowed-cidrs"} {
		_, err := tryRender(t, values(t, "pxe: {enabled: true, extraArgs: {"+flag+": x}}"))
		if err == nil || !strings.Contains(err.Error(), "pxe.extraArgs."+flag) {
			t.Errorf("pxe.extraArgs.%s: error %v, want one naming it", flag, err)
		}
	}
	if _, err := tryRender(t, values(t, "pxe: {enabled: true}\nextraArgs: {pxe-namespace: other}")); err == nil ||
		!strings.Contains(err.Error(), "extraArgs.pxe-namespace") {
		t.Errorf("extraArgs.pxe-namespace with pxe enabled: error %v, want one naming it", err)
	}
}

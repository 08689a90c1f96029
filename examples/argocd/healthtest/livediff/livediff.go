// Package livediff compares what charts/kubefarm renders with the live
// objects, with ArgoCD's own diff code, the way the application controller
// does for an Application with default settings. An object it reports is
// one ArgoCD would show OutOfSync.
//
// The comparison is argo-cd's util/argo/diff.StateDiffs, the function the
// controller calls (controller/state.go, CompareAppState), with a DiffConfig
// built as the controller builds it from a fresh install's argocd-cm: the
// resource overrides ArgoCD's settings manager makes of an empty argocd-cm
// (that is, "*/*" ignores /status, because
// resource.compareoptions.ignoreResourceStatusField defaults to "all"), no
// ignoreDifferences, annotation tracking, no server-side diff, no
// structured-merge diff (that needs the ServerSideApply=true sync option)
// and no diff cache.
//
// What diff that is: StateDiffs calls gitops-engine's diff.Diff, which runs
// a three-way diff when the live object carries kubectl's
// last-applied-configuration annotation and a two-way diff otherwise. Helm
// creates objects without that annotation, so for a release installed by
// `helm install` (what kubefarm's e2e test does) ArgoCD runs the two-way
// diff: it applies the rendered object onto the live one as a JSON merge
// patch and calls the object OutOfSync when the result differs from the
// live object. Before that, gitops-engine drops from the live object every
// field the rendered one does not have, inside list items too (item by
// item, by position). So fields only the live object has (server-side
// defaults, status, metadata the API server or a controller writes) are
// never a drift; a rendered field whose live value differs, or that the
// live object lacks, is, and so is a live list with more items than the
// rendered one. Once ArgoCD itself syncs the
// Application (client-side apply, its default), the live objects carry the
// annotation with the rendered object in it, and the three-way diff with
// that original computes the same patch: the result does not depend on who
// applied last, as long as the rendered objects did not change since
// (TestLastAppliedAnnotationGivesTheSameResult).
package livediff

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/argoproj/argo-cd/v3/common"
	argodiff "github.com/argoproj/argo-cd/v3/util/argo/diff"
	"github.com/argoproj/argo-cd/v3/util/argo/normalizers"
	"github.com/argoproj/argo-cd/v3/util/settings"
	"github.com/argoproj/gitops-engine/pkg/sync/hook"
	"github.com/argoproj/gitops-engine/pkg/sync/ignore"
	"github.com/argoproj/gitops-engine/pkg/utils/kube"
	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"
)

// argocdNamespace is where the fake API server keeps argocd-cm.
const argocdNamespace = "argocd"

// Drift is a rendered object whose live counterpart ArgoCD would show
// OutOfSync.
type Drift struct {
	Group     string
	Kind      string
	Namespace string
	Name      string
	// Missing is true when there is no live object at all.
	Missing bool
	// Fields are the differences between the live object and the object
	// ArgoCD predicts the sync would leave (both normalized by ArgoCD).
	Fields []Field
}

// Field is one difference inside an object.
type Field struct {
	// Path is a JSON path such as spec.machines[0].macs[1].
	Path string
	// Live is the live value and Desired the value a sync would set, as
	// JSON; Absent when the field is not there.
	Live, Desired string
}

// Absent stands for a field that one side does not have.
const Absent = "<absent>"

// Object names the object: kubefarm.io/NodePool farm1/farm1-pool0.
func (d Drift) Object() string {
	gk := d.Kind
	if d.Group != "" {
		gk = d.Group + "/" + d.Kind
	}
	if d.Namespace == "" {
		return gk + " " + d.Name
	}
	return gk + " " + d.Namespace + "/" + d.Name
}

func (d Drift) String() string {
	if d.Missing {
		return d.Object() + ": no live object (ArgoCD: OutOfSync, Missing)"
	}
	var b strings.Builder
	b.WriteString(d.Object() + ": OutOfSync")
	for _, f := range d.Fields {
		fmt.Fprintf(&b, "\n  %s: live %s, desired %s", f.Path, f.Live, f.Desired)
	}
	return b.String()
}

// Parse splits multi-document YAML into objects with the function ArgoCD's
// repo server uses on `helm template` output (gitops-engine's
// kube.SplitYAML): `---` separators, comments such as Helm's
// `# Source:` lines and empty documents are fine.
func Parse(data []byte) ([]*unstructured.Unstructured, error) {
	objs, err := kube.SplitYAML(data)
	if err != nil {
		return nil, err
	}
	out := objs[:0]
	for _, o := range objs {
		if len(o.Object) > 0 {
			out = append(out, o)
		}
	}
	return out, nil
}

// Managed drops the rendered objects the controller leaves out of an
// Application's sync status: hooks (Helm's and ArgoCD's) and objects
// ArgoCD ignores. charts/kubefarm renders none, so normally it returns its
// argument.
func Managed(desired []*unstructured.Unstructured) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range desired {
		if hook.IsHook(o) || hook.Skip(o) || ignore.Ignore(o) {
			continue
		}
		out = append(out, o)
	}
	return out
}

// Check matches each managed desired object (see Managed) to the live
// object of the same group, kind, namespace and name, diffs every pair
// with argo-cd's StateDiffs and returns the objects ArgoCD would show
// OutOfSync, in the order of desired. A desired object without a namespace
// takes the namespace of the one live object of its group, kind and name,
// as ArgoCD gives it the Application's destination namespace. Live objects
// that nothing renders are not reported: ArgoCD would not track them.
func Check(desired, live []*unstructured.Unstructured) ([]Drift, error) {
	cfg, err := defaultDiffConfig()
	if err != nil {
		return nil, err
	}
	liveByKey := map[kube.ResourceKey]*unstructured.Unstructured{}
	for _, o := range live {
		k := kube.GetResourceKey(o)
		if _, dup := liveByKey[k]; dup {
			return nil, fmt.Errorf("live object %s is listed twice", k.String())
		}
		liveByKey[k] = o
	}
	var targets, lives []*unstructured.Unstructured
	seen := map[kube.ResourceKey]bool{}
	for _, d := range Managed(desired) {
		t := d.DeepCopy()
		if t.GetNamespace() == "" {
			if ns, ok := onlyNamespace(t, live); ok {
				t.SetNamespace(ns)
			}
		}
		k := kube.GetResourceKey(t)
		if seen[k] {
			// ArgoCD reports a RepeatedResourceWarning and compares one of them.
			return nil, fmt.Errorf("desired object %s is rendered twice", k.String())
		}
		seen[k] = true
		targets = append(targets, t)
		lives = append(lives, liveByKey[k]) // nil: missing
	}
	if len(targets) == 0 {
		return nil, nil
	}
	res, err := argodiff.StateDiffs(lives, targets, cfg)
	if err != nil {
		return nil, err
	}
	if len(res.Diffs) != len(targets) {
		return nil, fmt.Errorf("argo-cd returned %d diffs for %d objects", len(res.Diffs), len(targets))
	}
	var drifts []Drift
	for i, t := range targets {
		r := res.Diffs[i]
		if !r.Modified && lives[i] != nil {
			continue
		}
		gvk := t.GroupVersionKind()
		d := Drift{Group: gvk.Group, Kind: gvk.Kind, Namespace: t.GetNamespace(), Name: t.GetName(), Missing: lives[i] == nil}
		if !d.Missing {
			d.Fields, err = fieldDiffs(r.NormalizedLive, r.PredictedLive)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d.Object(), err)
			}
		}
		drifts = append(drifts, d)
	}
	return drifts, nil
}

func onlyNamespace(t *unstructured.Unstructured, live []*unstructured.Unstructured) (string, bool) {
	gk := t.GroupVersionKind().GroupKind()
	ns, n := "", 0
	for _, o := range live {
		if o.GroupVersionKind().GroupKind() == gk && o.GetName() == t.GetName() {
			ns = o.GetNamespace()
			n++
		}
	}
	return ns, n == 1
}

var (
	configOnce sync.Once
	config     argodiff.DiffConfig
	configErr  error
)

// defaultDiffConfig is the DiffConfig CompareAppState builds for an
// Application without annotations, sync options or ignoreDifferences, on
// an ArgoCD whose argocd-cm sets nothing: every setting comes from
// ArgoCD's settings manager reading that argocd-cm from a fake API server,
// not from a copy of its defaults.
func defaultDiffConfig() (argodiff.DiffConfig, error) {
	configOnce.Do(func() {
		config, configErr = buildDiffConfig()
	})
	return config, configErr
}

func buildDiffConfig() (argodiff.DiffConfig, error) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name:      common.ArgoCDConfigMapName,
		Namespace: argocdNamespace,
		Labels:    map[string]string{"app.kubernetes.io/part-of": "argocd"},
	}}
	// The settings manager logs its informer start and its defaults at
	// info level: noise in a test's output.
	level := log.GetLevel()
	log.SetLevel(log.WarnLevel)
	defer log.SetLevel(level)
	mgr := settings.NewSettingsManager(context.Background(), fake.NewClientset(cm), argocdNamespace)
	overrides, err := mgr.GetResourceOverrides()
	if err != nil {
		return nil, fmt.Errorf("argocd resource overrides: %w", err)
	}
	compare, err := mgr.GetResourceCompareOptions()
	if err != nil {
		return nil, fmt.Errorf("argocd compare options: %w", err)
	}
	labelKey, err := mgr.GetAppInstanceLabelKey()
	if err != nil {
		return nil, err
	}
	tracking, err := mgr.GetTrackingMethod()
	if err != nil {
		return nil, err
	}
	// The controller's --ignore-normalizer-jq-execution-timeout-seconds
	// defaults to 0, which the normalizer reads as its 1s default.
	return argodiff.NewDiffConfigBuilder().
		WithDiffSettings(nil, overrides, compare.IgnoreAggregatedRoles, normalizers.IgnoreNormalizerOpts{}).
		WithTracking(labelKey, tracking).
		WithNoCache().
		WithManager(common.ArgoCDSSAManager).
		WithServerSideDiff(false).
		WithStructuredMergeDiff(false).
		Build()
}

// fieldDiffs lists where the normalized live object and the predicted
// live object (ArgoCD's DiffResult) differ.
func fieldDiffs(normalizedLive, predictedLive []byte) ([]Field, error) {
	var live, predicted any
	if err := decode(normalizedLive, &live); err != nil {
		return nil, fmt.Errorf("normalized live: %w", err)
	}
	if err := decode(predictedLive, &predicted); err != nil {
		return nil, fmt.Errorf("predicted live: %w", err)
	}
	var out []Field
	walk("", live, predicted, true, true, &out)
	if len(out) == 0 {
		// Modified but equal as JSON values: say so rather than report an
		// object without fields.
		out = append(out, Field{Path: "(whole object)", Live: string(normalizedLive), Desired: string(predictedLive)})
	}
	return out, nil
}

func decode(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

func walk(path string, live, want any, haveLive, haveWant bool, out *[]Field) {
	if haveLive && haveWant {
		switch l := live.(type) {
		case map[string]any:
			if w, ok := want.(map[string]any); ok {
				keys := map[string]bool{}
				for k := range l {
					keys[k] = true
				}
				for k := range w {
					keys[k] = true
				}
				sorted := make([]string, 0, len(keys))
				for k := range keys {
					sorted = append(sorted, k)
				}
				sort.Strings(sorted)
				for _, k := range sorted {
					lv, lok := l[k]
					wv, wok := w[k]
					walk(join(path, k), lv, wv, lok, wok, out)
				}
				return
			}
		case []any:
			if w, ok := want.([]any); ok {
				for i := 0; i < max(len(l), len(w)); i++ {
					var lv, wv any
					if i < len(l) {
						lv = l[i]
					}
					if i < len(w) {
						wv = w[i]
					}
					walk(fmt.Sprintf("%s[%d]", path, i), lv, wv, i < len(l), i < len(w), out)
				}
				return
			}
		}
	}
	ls, ws := render(live, haveLive), render(want, haveWant)
	if ls != ws {
		*out = append(*out, Field{Path: path, Live: ls, Desired: ws})
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func render(v any, ok bool) string {
	if !ok {
		return Absent
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return string(b)
}

// Describe is every drift, one object after the other, for a test failure.
func Describe(drifts []Drift) string {
	parts := make([]string, len(drifts))
	for i, d := range drifts {
		parts[i] = d.String()
	}
	return strings.Join(parts, "\n")
}

package drain_test

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubefarm/kubefarm/controllers/rollout/drain"
)

// pod is a pod "ns/name" with the given changes applied.
func pod(ns, name string, changes ...func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, change := range changes {
		change(&p)
	}
	return p
}

func ownedBy(apiVersion, kind string, controller bool) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{
			APIVersion: apiVersion, Kind: kind, Name: "owner", UID: "u-" + types.UID(kind),
			Controller: new(controller),
		})
	}
}

func mirror(p *corev1.Pod) {
	p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "0123456789abcdef"}
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1", UID: "node-uid", Controller: new(true)}}
}

func terminating(p *corev1.Pod) {
	now := metav1.Now()
	p.DeletionTimestamp = &now
	p.DeletionGracePeriodSeconds = new(int64(30))
}

func phase(ph corev1.PodPhase) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Status.Phase = ph }
}

func emptyDir(p *corev1.Pod) {
	p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
}

func names(ss ...string) []types.NamespacedName {
	var out []types.NamespacedName
	for _, s := range ss {
		ns, name, _ := strings.Cut(s, "/")
		out = append(out, types.NamespacedName{Namespace: ns, Name: name})
	}
	return out
}

func TestClassify(t *testing.T) {
	rs := ownedBy("apps/v1", "ReplicaSet", true)
	ds := ownedBy("apps/v1", "DaemonSet", true)
	for _, tc := range []struct {
		name string
		pods []corev1.Pod
		want drain.Plan
	}{
		{name: "no pods", want: drain.Plan{}},
		{
			name: "a ReplicaSet's running pod is evicted",
			pods: []corev1.Pod{pod("a", "web", rs, phase(corev1.PodRunning))},
			want: drain.Plan{Evict: names("a/web")},
		},
		{
			name: "an unmanaged pod is evicted (kubectl needs --force)",
			pods: []corev1.Pod{pod("a", "bare", phase(corev1.PodRunning))},
			want: drain.Plan{Evict: names("a/bare")},
		},
		{
			name: "a pod with emptyDir is evicted (kubectl needs --delete-emptydir-data)",
			pods: []corev1.Pod{pod("a", "scratch", rs, emptyDir)},
			want: drain.Plan{Evict: names("a/scratch")},
		},
		{
			name: "finished pods are evicted",
			pods: []corev1.Pod{pod("a", "ok", phase(corev1.PodSucceeded)), pod("a", "ko", rs, phase(corev1.PodFailed))},
			want: drain.Plan{Evict: names("a/ko", "a/ok")},
		},
		{
			name: "a pending pod is evicted",
			pods: []corev1.Pod{pod("a", "new", rs, phase(corev1.PodPending))},
			want: drain.Plan{Evict: names("a/new")},
		},
		{
			name: "a DaemonSet's pod is ignored",
			pods: []corev1.Pod{pod("kube-system", "flannel-x1", ds, phase(corev1.PodRunning))},
			want: drain.Plan{Ignored: []drain.Ignored{{Pod: names("kube-system/flannel-x1")[0], Reason: drain.IgnoredDaemonSet}}},
		},
		{
			name: "a terminating DaemonSet pod is ignored, not waited for",
			pods: []corev1.Pod{pod("kube-system", "flannel-x1", ds, terminating)},
			want: drain.Plan{Ignored: []drain.Ignored{{Pod: names("kube-system/flannel-x1")[0], Reason: drain.IgnoredDaemonSet}}},
		},
		{
			name: "a DaemonSet that owns without controlling does not make the pod a DaemonSet pod",
			pods: []corev1.Pod{pod("a", "adopted", ownedBy("apps/v1", "DaemonSet", false))},
			want: drain.Plan{Evict: names("a/adopted")},
		},
		{
			name: "a DaemonSet controller reference with no controller flag does not count",
			pods: []corev1.Pod{pod("a", "noflag", func(p *corev1.Pod) {
				p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "d", UID: "u"}}
			})},
			want: drain.Plan{Evict: names("a/noflag")},
		},
		{
			name: "a kind called DaemonSet in another group is not the apps DaemonSet",
			pods: []corev1.Pod{pod("a", "kruise", ownedBy("apps.kruise.io/v1alpha1", "DaemonSet", true))},
			want: drain.Plan{Evict: names("a/kruise")},
		},
		{
			name: "a non-controller DaemonSet owner beside a ReplicaSet controller",
			pods: []corev1.Pod{pod("a", "two-owners", ownedBy("apps/v1", "DaemonSet", false), rs)},
			want: drain.Plan{Evict: names("a/two-owners")},
		},
		{
			name: "a mirror pod is ignored",
			pods: []corev1.Pod{pod("kube-system", "etcd-n1", mirror, phase(corev1.PodRunning))},
			want: drain.Plan{Ignored: []drain.Ignored{{Pod: names("kube-system/etcd-n1")[0], Reason: drain.IgnoredMirror}}},
		},
		{
			name: "a terminating mirror pod is ignored",
			pods: []corev1.Pod{pod("kube-system", "etcd-n1", mirror, terminating)},
			want: drain.Plan{Ignored: []drain.Ignored{{Pod: names("kube-system/etcd-n1")[0], Reason: drain.IgnoredMirror}}},
		},
		{
			name: "a terminating pod is waited for, not evicted again",
			pods: []corev1.Pod{pod("a", "leaving", rs, phase(corev1.PodRunning), terminating)},
			want: drain.Plan{Wait: names("a/leaving")},
		},
		{
			name: "a terminating unmanaged pod is waited for",
			pods: []corev1.Pod{pod("a", "leaving", terminating)},
			want: drain.Plan{Wait: names("a/leaving")},
		},
		{
			name: "a terminating finished pod is waited for",
			pods: []corev1.Pod{pod("a", "done", phase(corev1.PodSucceeded), terminating)},
			want: drain.Plan{Wait: names("a/done")},
		},
		{
			name: "every list is in namespace/name order, whatever the input's",
			pods: []corev1.Pod{
				pod("b", "a", rs),
				pod("kube-system", "proxy", ds),
				pod("a", "z", rs),
				pod("a", "b", terminating),
				pod("kube-system", "apiserver-n1", mirror),
				pod("a", "a", terminating),
				pod("ab", "a"),
				pod("a", "y"),
				pod("a", "dns", ds),
			},
			want: drain.Plan{
				Evict: names("a/y", "a/z", "ab/a", "b/a"),
				Wait:  names("a/a", "a/b"),
				Ignored: []drain.Ignored{
					{Pod: names("a/dns")[0], Reason: drain.IgnoredDaemonSet},
					{Pod: names("kube-system/apiserver-n1")[0], Reason: drain.IgnoredMirror},
					{Pod: names("kube-system/proxy")[0], Reason: drain.IgnoredDaemonSet},
				},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]corev1.Pod(nil), tc.pods...)
			got := drain.Classify(in)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Classify:\n got %+v\nwant %+v", got, tc.want)
			}
			if !reflect.DeepEqual(in, tc.pods) {
				t.Error("Classify changed its input")
			}
		})
	}
}

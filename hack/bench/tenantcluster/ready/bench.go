package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/e2e/cluster"
)

type bench struct {
	c               client.WithWatch
	cs              kubernetes.Interface
	memorySettle    time.Duration
	version         string
	timeout         time.Duration
	teardownTimeout time.Duration
	ownVolumes      bool
	volumesDir      string
	example         *kubefarmv1.TenantCluster
}

// tenant is the e2e scenario's shape, reduced to one etcd member and one
// API server: the smallest control plane the controller makes Ready.
func (b *bench) tenant(namespace string) *kubefarmv1.TenantCluster {
	tc := b.example.DeepCopy()
	tc.Name, tc.Namespace = tenantName, namespace
	tc.Spec.Version = b.version
	one := int32(1)
	tc.Spec.APIServer.Replicas = &one
	tc.Spec.APIServer.Expose = kubefarmv1.APIServerExpose{Type: kubefarmv1.ExposeNodePort}
	tc.Spec.Etcd.Replicas = 1
	size := resource.MustParse("1Gi")
	tc.Spec.Etcd.StorageSize = &size
	tc.Spec.VolumeReclaimPolicy = kubefarmv1.VolumeReclaimDelete
	return tc
}

// once is one run: namespace, (volume), TenantCluster, wait for Ready,
// then delete everything and wait until it is gone. Teardown runs also
// after a failure, so a failed run leaves nothing for the next.
func (b *bench) once(ctx context.Context, warmup bool) (res runResult, retErr error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-ready-", Labels: map[string]string{"kubefarm.io/bench": "ready"}}}
	if err := b.c.Create(ctx, ns); err != nil {
		return res, fmt.Errorf("creating a namespace: %w", err)
	}
	res = runResult{Namespace: ns.Name, Warmup: warmup, Conditions: map[string]float64{}}
	tc := b.tenant(ns.Name)
	var pv *corev1.PersistentVolume
	defer func() {
		// A fresh context: teardown must run after Ctrl-C as well.
		tctx, cancel := context.WithTimeout(context.Background(), b.teardownTimeout)
		defer cancel()
		start := time.Now()
		times, err := b.teardown(tctx, tc, ns, pv)
		res.TeardownSeconds, res.Teardown = time.Since(start).Seconds(), times
		if err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("teardown of %s: %w", ns.Name, err))
		}
	}()
	if b.ownVolumes {
		var err error
		if pv, err = b.createVolume(ctx, ns.Name); err != nil {
			return res, err
		}
	}

	rctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	res.StartedAtUTC = time.Now().UTC()
	start := time.Now()
	if err := b.c.Create(rctx, tc); err != nil {
		return res, fmt.Errorf("creating the TenantCluster: %w", err)
	}
	last, err := b.waitReady(rctx, tc, func(cond string) {
		if _, seen := res.Conditions[cond]; !seen {
			res.Conditions[cond] = time.Since(start).Seconds()
		}
	})
	if err != nil {
		return res, fmt.Errorf("the TenantCluster never became Ready: %w%s%s", err, describe(last), b.describePods(ns.Name))
	}
	res.ReadySeconds = time.Since(start).Seconds()
	res.Endpoint = last.Status.Endpoint
	if b.memorySettle > 0 && !warmup {
		m, err := b.idleMemory(ctx, ns.Name)
		if err != nil {
			return res, err
		}
		res.Memory = m
	}
	return res, nil
}

// waitReady lists, then watches from the list's resourceVersion (no gap
// between the two), until the TenantCluster is Ready for its current
// generation. A watch the server closes is resumed the same way. seen is
// called with every timed condition found True, as soon as it is observed.
func (b *bench) waitReady(ctx context.Context, tc *kubefarmv1.TenantCluster, seen func(string)) (*kubefarmv1.TenantCluster, error) {
	last := tc.DeepCopy()
	check := func(got *kubefarmv1.TenantCluster) bool {
		if got.Name != tc.Name {
			return false
		}
		last = got
		for _, cond := range conditionsTimed {
			if c := meta.FindStatusCondition(got.Status.Conditions, cond); c != nil && c.Status == metav1.ConditionTrue &&
				c.ObservedGeneration == got.Generation {
				seen(cond)
			}
		}
		ready := meta.FindStatusCondition(got.Status.Conditions, kubefarmv1.ConditionReady)
		return got.Status.ObservedGeneration == got.Generation && ready != nil &&
			ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == got.Generation
	}
	for {
		list := &kubefarmv1.TenantClusterList{}
		if err := b.c.List(ctx, list, client.InNamespace(tc.Namespace)); err != nil {
			if ctx.Err() != nil {
				return last, ctx.Err()
			}
			time.Sleep(pollInterval) // a transient API error: list again
			continue
		}
		for i := range list.Items {
			if check(&list.Items[i]) {
				return last, nil
			}
		}
		w, err := b.c.Watch(ctx, &kubefarmv1.TenantClusterList{}, client.InNamespace(tc.Namespace),
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			if ctx.Err() != nil {
				return last, ctx.Err()
			}
			time.Sleep(pollInterval)
			continue
		}
		done, err := func() (bool, error) {
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return false, ctx.Err()
				case ev, ok := <-w.ResultChan():
					if !ok || ev.Type == watch.Error {
						return false, nil // closed or expired: list and watch again
					}
					got, isTC := ev.Object.(*kubefarmv1.TenantCluster)
					if !isTC {
						continue
					}
					if ev.Type == watch.Deleted && got.Name == tc.Name {
						return false, errors.New("the TenantCluster was deleted")
					}
					if check(got) {
						return true, nil
					}
				}
			}
		}()
		if err != nil || done {
			return last, err
		}
	}
}

// createVolume makes a fresh hostPath PersistentVolume for the run's one
// etcd member, pre-bound to its claim: the StatefulSet names the claim
// <template>-<set>-<ordinal>, with the template "data" and the set
// "<tenant>-etcd" (controllers/tenantcluster/desired). Pre-binding makes the
// binder take this volume and no other, and leaves the cluster's static
// volumes to the e2e scenarios.
func (b *bench) createVolume(ctx context.Context, namespace string) (*corev1.PersistentVolume, error) {
	dir := filepath.Join(b.volumesDir, namespace)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("creating the volume directory (the e2e cluster runs on this machine, as root): %w", err)
	}
	if err := os.Chown(dir, volumeOwner, volumeOwner); err != nil {
		return nil, fmt.Errorf("handing %s to uid %d: %w", dir, volumeOwner, err)
	}
	class := cluster.StorageClassName
	dirType := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: map[string]string{"kubefarm.io/bench": "ready"}},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName:              class,
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirType}},
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: namespace,
				Name: fmt.Sprintf("data-%s-etcd-0", tenantName),
			},
		},
	}
	if err := b.c.Create(ctx, pv); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("creating the run's PersistentVolume: %w", err)
	}
	return pv, nil
}

// teardown deletes the TenantCluster (its finalizer runs in the
// controller), waits for it and for its pods to be gone, then deletes the
// namespace, then the run's volume, waiting for each to be gone so that the
// next run starts on a quiet cluster. It reports when each was gone.
func (b *bench) teardown(ctx context.Context, tc *kubefarmv1.TenantCluster, ns *corev1.Namespace, pv *corev1.PersistentVolume) (teardownTimes, error) {
	var times teardownTimes
	start := time.Now()
	gone := func(obj client.Object) error {
		key := client.ObjectKeyFromObject(obj)
		for {
			err := b.c.Get(ctx, key, obj)
			if apierrors.IsNotFound(err) {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%T %s still there: %w", obj, key, ctx.Err())
			case <-time.After(pollInterval):
			}
		}
	}
	var errs []error
	if err := b.c.Delete(ctx, tc); client.IgnoreNotFound(err) != nil {
		errs = append(errs, err)
	} else if err := gone(&kubefarmv1.TenantCluster{ObjectMeta: tc.ObjectMeta}); err != nil {
		errs = append(errs, err)
	}
	times.TenantGone = time.Since(start).Seconds()
	// The pods go with their owners (garbage collection): the last one to
	// go is what a deletion waits for.
	if err := b.waitPodsGone(ctx, ns.Name, &times.LastPod); err != nil {
		errs = append(errs, err)
	}
	times.PodsGone = time.Since(start).Seconds()
	if err := b.c.Delete(ctx, ns); client.IgnoreNotFound(err) != nil {
		errs = append(errs, err)
	} else if err := gone(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name}}); err != nil {
		errs = append(errs, err)
	}
	times.NamespaceGone = time.Since(start).Seconds()
	if pv != nil {
		// Retain: the claim's deletion only releases it. Its directory
		// goes once the object is gone (the kubelet has unmounted it by
		// then: the namespace, hence the pod, is gone).
		if err := b.c.Delete(ctx, pv); client.IgnoreNotFound(err) != nil {
			errs = append(errs, err)
		} else if err := gone(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pv.Name}}); err != nil {
			errs = append(errs, err)
		} else if err := os.RemoveAll(pv.Spec.HostPath.Path); err != nil {
			errs = append(errs, err)
		}
	}
	return times, errors.Join(errs...)
}

// waitPodsGone polls until the namespace has no pod, noting the name of
// the last one seen.
func (b *bench) waitPodsGone(ctx context.Context, namespace string, last *string) error {
	for {
		pods := &corev1.PodList{}
		if err := b.c.List(ctx, pods, client.InNamespace(namespace)); err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return nil
		}
		*last = pods.Items[0].Name
		select {
		case <-ctx.Done():
			return fmt.Errorf("pods of %s still there: %w", namespace, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

// describe says where a tenant stood, for a run that timed out.
func describe(tc *kubefarmv1.TenantCluster) string {
	if tc == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n  generation %d, observed %d, endpoint %q", tc.Generation, tc.Status.ObservedGeneration, tc.Status.Endpoint)
	for _, c := range tc.Status.Conditions {
		fmt.Fprintf(&b, "\n  %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

// describePods lists the run's pods that are not running and ready, with
// why (unschedulable, waiting), for a run that timed out.
func (b *bench) describePods(namespace string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods := &corev1.PodList{}
	if err := b.c.List(ctx, pods, client.InNamespace(namespace)); err != nil {
		return "\n  listing pods: " + err.Error()
	}
	var sb strings.Builder
	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue && c.Message != "" {
				fmt.Fprintf(&sb, "\n  pod %s %s: %s %s", p.Name, p.Status.Phase, c.Type, c.Message)
			}
		}
		for _, st := range p.Status.ContainerStatuses {
			if st.State.Waiting != nil {
				fmt.Fprintf(&sb, "\n  pod %s container %s waiting: %s %s", p.Name, st.Name, st.State.Waiting.Reason, st.State.Waiting.Message)
			}
		}
	}
	return sb.String()
}

package tenantcluster

import (
	"context"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
)

// What etcd's state is decided from: the StatefulSet and the volumes of
// earlier members (docs/etcd.md).

// decideEtcdState says whether etcd members start with the initial cluster
// state new or existing (the etcd state ConfigMap, which members read when
// they start). "new" is only right for the very first bootstrap;
// afterwards a member that starts with an empty data directory must join,
// never bootstrap a second cluster. Observable facts:
//   - a state ConfigMap that already says "existing" keeps it, and so does
//     a StatefulSet of an earlier kubefarm that had it as a flag;
//   - a StatefulSet with a ready member has bootstrapped: readiness needs
//     quorum, so a cluster exists. Switching restarts nothing: running
//     members never read it again;
//   - no StatefulSet but volumes of earlier members (a TenantCluster
//     recreated after deletion with volumeReclaimPolicy Retain): the data
//     is a cluster that already exists;
//   - otherwise nothing was ever bootstrapped.
func decideEtcdState(sts *appsv1.StatefulSet, state *corev1.ConfigMap, existingVolumes int) desired.EtcdClusterState {
	if state != nil && state.Data[desired.EtcdStateKey] == string(desired.EtcdClusterExisting) {
		return desired.EtcdClusterExisting
	}
	if sts == nil {
		if existingVolumes > 0 {
			return desired.EtcdClusterExisting
		}
		return desired.EtcdClusterNew
	}
	if etcdStateOf(sts) == desired.EtcdClusterExisting || sts.Status.ReadyReplicas > 0 {
		return desired.EtcdClusterExisting
	}
	return desired.EtcdClusterNew
}

// etcdStateOf reads --initial-cluster-state back from a StatefulSet made by
// an earlier kubefarm, which had it as a flag.
func etcdStateOf(sts *appsv1.StatefulSet) desired.EtcdClusterState {
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name != desired.ComponentEtcd {
			continue
		}
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--initial-cluster-state="); ok {
				return desired.EtcdClusterState(v)
			}
		}
	}
	return ""
}

// etcdVolumes lists the PersistentVolumeClaims of the tenant's etcd
// members. The StatefulSet controller gives each claim the labels of the
// claim template, which identify the tenant and the component.
func (r *Reconciler) etcdVolumes(ctx context.Context, tc *v1alpha1.TenantCluster) ([]corev1.PersistentVolumeClaim, error) {
	list := &corev1.PersistentVolumeClaimList{}
	err := r.APIReader.List(ctx, list, client.InNamespace(tc.Namespace), client.MatchingLabels{
		desired.LabelInstance:       tc.Name,
		desired.LabelName:           desired.ComponentEtcd,
		v1alpha1.LabelTenantCluster: tc.Name,
	})
	return list.Items, err
}

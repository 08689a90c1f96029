package tenantcluster

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
)

// TestEtcdScalingDecision: when a pass treats the membership as changing.
// The StatefulSet's mark is what makes a change whose last status write was
// lost (the last learner added, the StatefulSet already at the spec's
// count) go on to promote that learner; etcd envtest cannot run a second
// member, so this case is shown here.
func TestEtcdScalingDecision(t *testing.T) {
	sts := func(replicas int32, marked bool) *appsv1.StatefulSet {
		s := &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: &replicas}}
		if marked {
			s.Annotations = map[string]string{v1alpha1.AnnotationEtcdScaling: "3"}
		}
		return s
	}
	tenant := func(scaling metav1.ConditionStatus) *v1alpha1.TenantCluster {
		tc := &v1alpha1.TenantCluster{}
		if scaling != "" {
			tc.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionEtcdScaling, Status: scaling}}
		}
		return tc
	}
	for _, tt := range []struct {
		name  string
		tc    *v1alpha1.TenantCluster
		live  *appsv1.StatefulSet
		state desired.EtcdClusterState
		want  bool
	}{
		{"at the spec's count, nothing under way", tenant(metav1.ConditionFalse), sts(3, false), desired.EtcdClusterExisting, false},
		{"another count than the spec's", tenant(""), sts(2, false), desired.EtcdClusterExisting, true},
		{"EtcdScaling True from the last pass", tenant(metav1.ConditionTrue), sts(3, false), desired.EtcdClusterExisting, true},
		{"the last step's status write lost: the mark alone", tenant(metav1.ConditionFalse), sts(3, true), desired.EtcdClusterExisting, true},
		{"the mark, no status at all", tenant(""), sts(3, true), desired.EtcdClusterExisting, true},
		{"bootstrapping: the members start as they are", tenant(""), sts(1, false), desired.EtcdClusterNew, false},
		{"no StatefulSet yet", tenant(""), nil, desired.EtcdClusterExisting, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := etcdScaling(tt.tc, tt.live, tt.state, 3); got != tt.want {
				t.Errorf("etcdScaling = %v, want %v", got, tt.want)
			}
		})
	}
}

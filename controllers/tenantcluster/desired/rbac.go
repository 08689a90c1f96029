package desired

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TenantRBAC returns the ClusterRoleBindings, to be created in the tenant
// cluster (with the super-admin identity), that give kubefarm's narrowed
// identities their permissions. They replace membership in system:masters,
// which kubeadm uses for some of these identities and which RBAC cannot
// revoke:
//   - the admin group gets cluster-admin;
//   - kube-apiserver's kubelet client gets system:kubelet-api-admin, which
//     is exactly what logs, exec, port-forward and metrics need from the
//     kubelet (the kubelet authorizes it by SubjectAccessReview, i.e. RBAC);
//   - konnectivity-server gets system:auth-delegator to review the agents'
//     service-account tokens.
func TenantRBAC(c *Cluster) []*rbacv1.ClusterRoleBinding {
	mk := func(name, role, kind, subject string) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{
			TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				LabelManagedBy: managedBy,
			}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: kind, Name: subject}},
		}
	}
	out := []*rbacv1.ClusterRoleBinding{
		mk("kubefarm:cluster-admins", "cluster-admin", rbacv1.GroupKind, GroupClusterAdmins),
		mk("kubefarm:apiserver-kubelet-client", "system:kubelet-api-admin", rbacv1.UserKind, UserKubeletClient),
	}
	if c.Konnectivity {
		out = append(out, mk("kubefarm:konnectivity-server", "system:auth-delegator", rbacv1.UserKind, UserKonnectivityServer))
	}
	return out
}

// Package build holds the pure builders of the TenantCluster controller: a
// TenantCluster (plus a few observed facts passed in as parameters) goes in,
// and flags, cert-manager objects, configuration files, kubeconfigs and the
// admin-cluster workloads of the tenant control plane come out.
//
// Nothing here talks to an API server, reads a clock or a random source, or
// iterates a map in Go's random order: the same input always yields
// reflect.DeepEqual output and byte-identical serializations. That is what
// lets the reconciler apply the result on every pass without causing
// spurious rollouts, and what lets every builder be table-tested.
//
// Entry point: Resolve turns a TenantCluster into a Cluster (defaults applied,
// addresses computed, names derived, inputs validated); every other builder
// takes that Cluster.
//
// Builders, in the order a reconciler would apply their output:
//
//   - Issuers, Certificates (cert-manager; CAs first), PodDisruptionBudgets;
//   - ConfigMap (admission and egress configuration, component kubeconfigs);
//   - EtcdService, EtcdStatefulSet, APIServerService, APIServerDeployment,
//     ControllerManagerDeployment, SchedulerDeployment;
//   - TenantRBAC, then Addons (bootstrap-token RBAC, cluster-info, kubelet
//     configuration, konnectivity-agent, kube-proxy, CoreDNS, the probe-host
//     admission policy), applied inside the tenant with the super-admin
//     identity;
//   - AdminKubeconfig for the admin kubeconfig Secret.
//
// Observed state enters only as explicit parameters: the external address
// (Options.ObservedExternalAddress), whether etcd was ever bootstrapped
// (EtcdClusterState) and the certificate Secrets' data (SecretData, hashed
// into a pod-template annotation so renewals roll the pods).
//
// Layout inside the control plane pods: every certificate Secret is mounted
// at /etc/kubernetes/pki/<role>/ with only the keys the container needs (a CA
// private key is mounted only into kube-controller-manager, which signs
// kubelet certificates with it); generated configuration files and
// kubeconfigs come from one ConfigMap mounted at /etc/kubernetes/config.
package desired

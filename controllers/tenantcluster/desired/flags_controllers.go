package desired

import (
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var controllerManagerPolicy = flagPolicy{
	exact: map[string]flagRule{
		"authentication-kubeconfig":        {reason: reasonFile},
		"authorization-kubeconfig":         {reason: reasonFile},
		"client-ca-file":                   {reason: reasonFile},
		"cluster-signing-cert-file":        {reason: reasonFile},
		"cluster-signing-key-file":         {reason: reasonFile},
		"kubeconfig":                       {reason: reasonFile},
		"requestheader-client-ca-file":     {reason: reasonFile},
		"root-ca-file":                     {reason: reasonFile},
		"service-account-private-key-file": {reason: reasonFile},
		"service-cluster-ip-range":         {reason: reasonReachable},
		"leader-elect":                     {reason: "several replicas run; without leader election they fight", check: mustBeTrue},
		"use-service-account-credentials": {
			reason: "each controller then acts with its own least-privilege identity",
			check:  mustBeTrue,
		},
		"controllers": {
			reason: "nodes join through bootstrap tokens, which need the bootstrapsigner and tokencleaner controllers",
			check:  allOf(mustContain("bootstrapsigner", "tokencleaner"), mustNotContain("-bootstrapsigner", "-tokencleaner")),
		},
	},
	prefixes: map[string]string{
		// Per-signer files (kubelet-serving, kubelet-client, ...) would
		// replace the cluster CA kubefarm mounts.
		"cluster-signing-kube":           reasonFile,
		"cluster-signing-legacy-unknown": reasonFile,
	},
}

var schedulerPolicy = flagPolicy{
	exact: map[string]flagRule{
		"authentication-kubeconfig": {reason: reasonFile},
		"authorization-kubeconfig":  {reason: reasonFile},
		"kubeconfig":                {reason: reasonFile},
		// A --config file replaces the flags above and kubefarm mounts none.
		"config":       {reason: reasonFile},
		"leader-elect": {reason: "several replicas run; without leader election they fight", check: mustBeTrue},
	},
}

// ControllerManagerFlags returns the kube-controller-manager flags.
func ControllerManagerFlags(c *Cluster) ([]string, error) {
	kubeconfig := configFile(ConfigKeyControllerManagerConf)
	d := map[string]string{
		"authentication-kubeconfig": kubeconfig,
		"authorization-kubeconfig":  kubeconfig,
		"bind-address":              "0.0.0.0",
		"client-ca-file":            pkiFile(RoleCA, secretCertKey),
		"cluster-name":              c.Name,
		// kube-controller-manager signs kubelet client and serving
		// certificates with the cluster CA's signing generation; this is
		// the one place a cluster CA key is mounted.
		"cluster-signing-cert-file":        pkiFile(RoleCASigner, secretCertKey),
		"cluster-signing-key-file":         pkiFile(RoleCASigner, secretPrivateKeyKey),
		"controllers":                      "*,bootstrapsigner,tokencleaner",
		"kubeconfig":                       kubeconfig,
		"leader-elect":                     "true",
		"profiling":                        "false",
		"requestheader-client-ca-file":     pkiFile(RoleFrontProxyCA, secretCertKey),
		"root-ca-file":                     pkiFile(RoleCA, secretCertKey),
		"service-account-private-key-file": pkiFile(RoleServiceAccount, secretPrivateKeyKey),
		"service-cluster-ip-range":         c.ServiceCIDR.String(),
		"use-service-account-credentials":  "true",
	}
	if c.PodCIDR.IsValid() {
		d["allocate-node-cidrs"] = "true"
		d["cluster-cidr"] = c.PodCIDR.String()
	}
	return mergeFlags(d, controllerManagerPolicy, c.ControllerManagerArgs, field.NewPath("spec", "controllerManager", "extraArgs"))
}

// SchedulerFlags returns the kube-scheduler flags.
func SchedulerFlags(c *Cluster) ([]string, error) {
	kubeconfig := configFile(ConfigKeySchedulerConf)
	d := map[string]string{
		"authentication-kubeconfig": kubeconfig,
		"authorization-kubeconfig":  kubeconfig,
		"bind-address":              "0.0.0.0",
		"kubeconfig":                kubeconfig,
		"leader-elect":              "true",
		"profiling":                 "false",
	}
	return mergeFlags(d, schedulerPolicy, c.SchedulerArgs, field.NewPath("spec", "scheduler", "extraArgs"))
}

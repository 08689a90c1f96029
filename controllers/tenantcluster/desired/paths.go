package desired

import "path"

// Where files live inside the control plane containers. Flags, volume mounts
// and kubeconfigs are all derived from these, so they cannot disagree.
const (
	pkiDir    = "/etc/kubernetes/pki"
	configDir = "/etc/kubernetes/config"
	// konnectivityUDSDir is an emptyDir shared by kube-apiserver and the
	// konnectivity-server sidecar; only the socket lives there.
	konnectivityUDSDir  = "/etc/kubernetes/konnectivity-server"
	konnectivitySocket  = konnectivityUDSDir + "/konnectivity-server.socket"
	etcdDataMount       = "/var/lib/etcd"
	etcdDataDir         = etcdDataMount + "/data"
	tmpDir              = "/tmp"
	secretCertKey       = "tls.crt"
	secretPrivateKeyKey = "tls.key"
	secretCAKey         = "ca.crt"
)

// Keys of the control plane ConfigMap; each is a file in configDir.
const (
	ConfigKeyEgressSelector        = "egress-selector-configuration.json"
	ConfigKeyAdmission             = "admission-configuration.json"
	ConfigKeyControllerManagerConf = "controller-manager.kubeconfig"
	ConfigKeySchedulerConf         = "scheduler.kubeconfig"
	ConfigKeyKonnectivityConf      = "konnectivity-server.kubeconfig"
)

// pkiFile is the path of one key of a PKI role's Secret.
func pkiFile(role PKIRole, key string) string { return path.Join(pkiDir, string(role), key) }

// configFile is the path of one key of the control plane ConfigMap.
func configFile(key string) string { return path.Join(configDir, key) }

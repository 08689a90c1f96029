package desired

import (
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// KonnectivityServerFlags returns the konnectivity-server flags. It serves
// kube-apiserver over the shared Unix socket only (--server-port=0, so no
// TCP frontend exists) and the agents on the agent port.
func KonnectivityServerFlags(c *Cluster) ([]string, error) {
	d := map[string]string{
		"admin-bind-address":       "127.0.0.1",
		"admin-port":               strconv.Itoa(int(KonnectivityAdminPort)),
		"agent-namespace":          "kube-system",
		"agent-port":               strconv.Itoa(int(KonnectivityAgentPort)),
		"agent-service-account":    "konnectivity-agent",
		"authentication-audience":  "system:konnectivity-server",
		"cluster-cert":             pkiFile(RoleKonnectivityServer, secretCertKey),
		"cluster-key":              pkiFile(RoleKonnectivityServer, secretPrivateKeyKey),
		"delete-existing-uds-file": "true",
		"health-port":              strconv.Itoa(int(KonnectivityHealthPort)),
		"kubeconfig":               configFile(ConfigKeyKonnectivityConf),
		"mode":                     "grpc",
		// Send traffic for a node through that node's agent when it has one.
		"proxy-strategies": "destHost,default",
		// One server per API server pod; agents keep connecting until they
		// have reached this many distinct servers behind the Service.
		"server-count": strconv.Itoa(int(c.APIServerReplicas)),
		"server-port":  "0",
		"uds-name":     konnectivitySocket,
	}
	return mergeFlags(d, flagPolicy{}, nil, field.NewPath("spec", "konnectivity", "extraArgs"))
}

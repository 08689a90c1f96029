package desired

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// EtcdClusterState is etcd's --initial-cluster-state.
type EtcdClusterState string

const (
	// EtcdClusterNew bootstraps a new cluster from --initial-cluster.
	EtcdClusterNew EtcdClusterState = "new"
	// EtcdClusterExisting makes a member with an empty data directory join
	// the running cluster (after the reconciler has added it as a member).
	EtcdClusterExisting EtcdClusterState = "existing"
)

// etcdMemberHost is the stable DNS name of member i, fully qualified so that
// it resolves the same in every pod regardless of search paths.
func (c *Cluster) etcdMemberHost(member string) string {
	return fmt.Sprintf("%s.%s.%s.svc.%s", member, c.EtcdServiceName(), c.Namespace, c.AdminClusterDomain)
}

func (c *Cluster) etcdMemberName(i int32) string {
	return fmt.Sprintf("%s-%d", c.EtcdServiceName(), i)
}

// EtcdMemberName is the name of member i (its pod's).
func (c *Cluster) EtcdMemberName(i int32) string { return c.etcdMemberName(i) }

// EtcdClientURL is the client URL of member i.
func (c *Cluster) EtcdClientURL(i int32) string {
	return fmt.Sprintf("https://%s:%d", c.etcdMemberHost(c.etcdMemberName(i)), EtcdClientPort)
}

// EtcdPeerURL is the peer URL of member i, spelled as in the initial
// cluster (etcd compares them).
func (c *Cluster) EtcdPeerURL(i int32) string {
	return fmt.Sprintf("https://%s:%d", c.etcdMemberHost(c.etcdMemberName(i)), EtcdPeerPort)
}

// EtcdClientURLs are the client URLs of the EtcdServers first members, in
// member order: the API servers' --etcd-servers and the backup's endpoints.
func (c *Cluster) EtcdClientURLs() []string {
	out := make([]string, 0, c.EtcdServers)
	for i := range c.EtcdServers {
		out = append(out, c.EtcdClientURL(i))
	}
	return out
}

// EtcdInitialCluster is etcd's --initial-cluster, the EtcdMembers first
// members' names and peer URLs. It is in the etcd state ConfigMap, not a
// flag: a member joining an existing cluster must list exactly its current
// members (etcd checks), which change one at a time while the pods of the
// running members must not.
// peer URL, in member order.
func (c *Cluster) EtcdInitialCluster() string {
	parts := make([]string, 0, c.EtcdMembers)
	for i := range c.EtcdMembers {
		parts = append(parts, c.etcdMemberName(i)+"="+c.EtcdPeerURL(i))
	}
	return strings.Join(parts, ",")
}

// Bounds of etcd's backend quota.
const (
	minEtcdQuota int64 = 256 << 20
	maxEtcdQuota int64 = 8 << 30 // etcd's documented practical maximum
)

// EtcdQuotaBytes is etcd's --quota-backend-bytes: three quarters of the
// member's volume, leaving room for the write-ahead log and snapshots on the
// same volume. With etcd's fixed 2 GiB default, a small volume would fill up
// before the quota alarm fires, and a full disk crashes etcd instead of
// turning it read-only.
func (c *Cluster) EtcdQuotaBytes() int64 {
	q := c.EtcdStorageSize.Value() / 4 * 3
	return min(max(q, minEtcdQuota), maxEtcdQuota)
}

// etcd's Raft timing on shared nodes, in milliseconds (see EtcdFlags).
const (
	EtcdHeartbeatMillis       = 250
	EtcdElectionTimeoutMillis = 2500
)

// EtcdFlags returns the etcd flags. The member name comes from the pod name
// through the POD_NAME environment variable (expanded by the kubelet), since
// every member shares one pod template. The initial cluster state is not a
// flag: etcd reads it from ETCD_INITIAL_CLUSTER_STATE, which the pods take
// from the etcd state ConfigMap (EtcdStateConfigMap), so that it can turn
// from new to existing without changing the pod template, which would
// restart every member once for a value only a member without data reads.
// The initial cluster is not a flag either, for the same reason: it is
// ETCD_INITIAL_CLUSTER, from the same ConfigMap, and changes with every
// membership change (EtcdInitialCluster).
func EtcdFlags(c *Cluster) ([]string, error) {
	self := c.etcdMemberHost("$(POD_NAME)")
	d := map[string]string{
		"advertise-client-urls": fmt.Sprintf("https://%s:%d", self, EtcdClientPort),
		"cert-file":             pkiFile(RoleEtcdServer, secretCertKey),
		"client-cert-auth":      "true",
		"data-dir":              etcdDataDir,
		// Members are pods on nodes shared with other control planes.
		// etcd's defaults (100 ms heartbeat, 1 s election) suit dedicated
		// machines: a member starved of CPU for a second (a neighbour's
		// pods starting, a rollout) costs an election, which fails the
		// in-flight API requests with "leader changed". 250 ms / 2.5 s keep
		// the 1:10 ratio etcd recommends; a leader that really dies is
		// replaced about 1.5 s later than with the defaults.
		"election-timeout":            strconv.Itoa(EtcdElectionTimeoutMillis),
		"heartbeat-interval":          strconv.Itoa(EtcdHeartbeatMillis),
		"initial-advertise-peer-urls": fmt.Sprintf("https://%s:%d", self, EtcdPeerPort),
		"initial-cluster-token":       c.etcdClusterToken(),
		"key-file":                    pkiFile(RoleEtcdServer, secretPrivateKeyKey),
		"listen-client-urls":          fmt.Sprintf("https://0.0.0.0:%d", EtcdClientPort),
		// Plain HTTP on its own port, for the kubelet's probes only.
		"listen-metrics-urls":   fmt.Sprintf("http://0.0.0.0:%d", EtcdMetricsPort),
		"listen-peer-urls":      fmt.Sprintf("https://0.0.0.0:%d", EtcdPeerPort),
		"name":                  "$(POD_NAME)",
		"peer-cert-file":        pkiFile(RoleEtcdPeer, secretCertKey),
		"peer-client-cert-auth": "true",
		// Only the peer certificate may act as a peer, not the API
		// server's etcd client certificate from the same CA.
		"peer-cert-allowed-cn": "etcd-peer",
		"peer-key-file":        pkiFile(RoleEtcdPeer, secretPrivateKeyKey),
		"peer-trusted-ca-file": pkiFile(RoleEtcdCA, secretCertKey),
		"quota-backend-bytes":  strconv.FormatInt(c.EtcdQuotaBytes(), 10),
		"trusted-ca-file":      pkiFile(RoleEtcdCA, secretCertKey),
	}
	// etcd has no extraArgs in the API (yet); merging nil keeps one code path.
	return mergeFlags(d, flagPolicy{}, nil, field.NewPath("spec", "etcd", "extraArgs"))
}

// The etcd state ConfigMap's key, and the environment variable etcd reads
// it from (etcd takes every flag as ETCD_<FLAG> too).
const (
	EtcdStateKey = "initial-cluster-state"
	EtcdStateEnv = "ETCD_INITIAL_CLUSTER_STATE"
	// EtcdInitialClusterKey and EtcdInitialClusterEnv carry
	// --initial-cluster the same way (EtcdInitialCluster).
	EtcdInitialClusterKey = "initial-cluster"
	EtcdInitialClusterEnv = "ETCD_INITIAL_CLUSTER"
)

// EtcdStateConfigMap holds etcd's initial cluster state and initial
// cluster (EtcdInitialCluster, for c.EtcdMembers), which the members read
// at start (see EtcdFlags). state is decided by the caller from
// observed state (has this cluster ever been bootstrapped?), not from
// whether this is an install or an upgrade: members with data ignore it,
// and a member that lost its data must join as "existing".
func EtcdStateConfigMap(c *Cluster, state EtcdClusterState) (*corev1.ConfigMap, error) {
	if state != EtcdClusterNew && state != EtcdClusterExisting {
		return nil, fmt.Errorf("etcd initial cluster state %q: must be %q or %q", state, EtcdClusterNew, EtcdClusterExisting)
	}
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: c.EtcdStateConfigMapName(), Namespace: c.Namespace, Labels: c.labels(ComponentEtcd)},
		Data:       map[string]string{EtcdStateKey: string(state), EtcdInitialClusterKey: c.EtcdInitialCluster()},
	}, nil
}

package desired

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// Flag precedence (the contract documented on ComponentSpec.ExtraArgs):
//
//  1. kubefarm derives a default for each flag it needs from the TenantCluster;
//  2. a user extraArgs entry replaces the default of the same flag, or adds
//     a flag kubefarm does not set;
//  3. except for protected flags. A protected flag is one kubefarm needs to
//     keep the tenant secure or reachable: files only kubefarm mounts
//     (certificates, keys, kubeconfigs, generated configuration), the
//     addresses every other component is built against, and the
//     authorization and admission settings the tenancy model relies on.
//     Setting a fully protected flag is an error. A constrained flag may be
//     set when the value keeps what kubefarm needs (e.g. authorization-mode
//     must still contain Node and RBAC).
//
// Conflicts are reported as field errors naming the extraArgs entry, e.g.
// `spec.apiServer.extraArgs[client-ca-file]: Forbidden: ...`, never silently
// dropped: a user who asked for something must learn it did not happen.
//
// Keys may be written with or without leading dashes ("v" or "--v"). The
// output is "--key=value" sorted by key, so the same input always produces a
// byte-identical slice (and pod template).

// flagRule protects one flag. A nil check means "never settable".
type flagRule struct {
	reason string
	check  func(value string) error
}

type flagPolicy struct {
	exact    map[string]flagRule
	prefixes map[string]string // prefix -> reason; always fully protected
}

func (p flagPolicy) rule(key string) (flagRule, bool) {
	if r, ok := p.exact[key]; ok {
		return r, true
	}
	// Sorted so that overlapping prefixes report the same reason every time.
	for _, pfx := range slices.Sorted(maps.Keys(p.prefixes)) {
		if strings.HasPrefix(key, pfx) {
			return flagRule{reason: p.prefixes[pfx]}, true
		}
	}
	return flagRule{}, false
}

// mergeFlags merges defaults and user extra args under a policy and renders
// them. fieldPath is where the extra args live in the TenantCluster, used in
// errors. All errors are collected, in key order, so the user sees every
// conflict at once.
func mergeFlags(defaults map[string]string, policy flagPolicy, extra map[string]string, fieldPath *field.Path) ([]string, error) {
	merged := maps.Clone(defaults)
	if merged == nil {
		merged = map[string]string{}
	}
	var errs field.ErrorList
	seen := map[string]string{}
	for _, raw := range slices.Sorted(maps.Keys(extra)) {
		p := fieldPath.Key(raw)
		value := extra[raw]
		key := strings.TrimLeft(raw, "-")
		switch {
		case key == "" || strings.ContainsAny(key, "= \t\n"):
			errs = append(errs, field.Invalid(p, raw, "must be a flag name such as \"v\" or \"--v\", without '=' or spaces"))
			continue
		case seen[key] != "":
			errs = append(errs, field.Duplicate(p, fmt.Sprintf("same flag as extraArgs[%s]", seen[key])))
			continue
		}
		seen[key] = raw
		if r, ok := policy.rule(key); ok {
			if r.check == nil {
				errs = append(errs, field.Forbidden(p, "flag --"+key+" is set by kubefarm and cannot be overridden: "+r.reason))
				continue
			}
			if err := r.check(value); err != nil {
				errs = append(errs, field.Invalid(p, value, err.Error()+": "+r.reason))
				continue
			}
		}
		merged[key] = value
	}
	if err := errs.ToAggregate(); err != nil {
		return nil, err
	}
	return renderFlags(merged), nil
}

func renderFlags(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, "--"+k+"="+m[k])
	}
	return out
}

// Checks for constrained flags.

func mustBeTrue(v string) error {
	b, err := strconv.ParseBool(v)
	if err != nil || !b {
		return fmt.Errorf("must be true")
	}
	return nil
}

func listItems(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func mustContain(required ...string) func(string) error {
	return func(v string) error {
		items := listItems(v)
		for _, r := range required {
			if !slices.Contains(items, r) {
				return fmt.Errorf("must contain %s", strings.Join(required, ","))
			}
		}
		return nil
	}
}

func mustNotContain(forbidden ...string) func(string) error {
	return func(v string) error {
		items := listItems(v)
		for _, f := range forbidden {
			if slices.Contains(items, f) {
				return fmt.Errorf("must not contain %s", f)
			}
		}
		return nil
	}
}

func allOf(checks ...func(string) error) func(string) error {
	return func(v string) error {
		for _, c := range checks {
			if err := c(v); err != nil {
				return err
			}
		}
		return nil
	}
}

const (
	reasonFile      = "it points at a file kubefarm mounts"
	reasonIdentity  = "it decides who a client is, which the tenancy model depends on"
	reasonReachable = "other components and certificates are built against it"
	// The File mode's volume is sized from these two; larger files would
	// overrun it and the kubelet would evict the API server.
	reasonAuditVolume = "the audit volume is sized from spec.apiServer.audit.maxSizeMB and maxBackups; set them there"
)

var apiServerPolicy = flagPolicy{
	exact: map[string]flagRule{
		"admission-control-config-file": {reason: reasonFile},
		"client-ca-file":                {reason: reasonFile},
		"egress-selector-config-file":   {reason: reasonFile},
		// Secrets are encrypted at rest with keys kubefarm generates and
		// rotates (docs/encryption.md). Automatic reload stays off: a key
		// change reaches the API servers by a rollout, which the rotation
		// observes before its next step; a reload would change a running
		// server's keys behind its back.
		"encryption-provider-config":                  {reason: reasonFile},
		"encryption-provider-config-automatic-reload": {reason: "key rotation relies on API servers changing keys only by a rollout"},
		"enable-bootstrap-token-auth":                 {reason: "nodes join with bootstrap tokens"},
		"etcd-cafile":                                 {reason: reasonFile},
		"etcd-certfile":                               {reason: reasonFile},
		"etcd-keyfile":                                {reason: reasonFile},
		"etcd-servers":                                {reason: reasonReachable},
		"kubelet-client-certificate":                  {reason: reasonFile},
		"kubelet-client-key":                          {reason: reasonFile},
		"proxy-client-cert-file":                      {reason: reasonFile},
		"proxy-client-key-file":                       {reason: reasonFile},
		"secure-port":                                 {reason: reasonReachable},
		"service-cluster-ip-range":                    {reason: reasonReachable},
		"tls-cert-file":                               {reason: reasonFile},
		"tls-private-key-file":                        {reason: reasonFile},
		"audit-policy-file":                           {reason: reasonFile},
		"endpoint-reconciler-type":                    {reason: "with a NodePort Service kubefarm keeps the tenant's kubernetes Service endpoints itself"},
		"audit-log-path":                              {reason: "it is set from spec.apiServer.audit.mode"},
		"audit-log-maxsize":                           {reason: reasonAuditVolume},
		"audit-log-maxbackup":                         {reason: reasonAuditVolume},
		"audit-webhook-config-file":                   {reason: reasonFile},
		// Static tokens cannot be rotated or revoked without a restart and
		// bypass every credential kubefarm manages.
		"token-auth-file": {reason: reasonIdentity},
		// An authorization config file replaces --authorization-mode and
		// could drop Node or RBAC; kubefarm does not mount one.
		"authorization-config": {reason: reasonFile},
		"authorization-mode": {
			reason: "the Node authorizer confines kubelets to their own node and RBAC carries every binding kubefarm creates",
			check:  allOf(mustContain("Node", "RBAC"), mustNotContain("AlwaysAllow")),
		},
		"enable-admission-plugins": {
			reason: "NodeRestriction stops a kubelet from modifying other nodes and their pods",
			check:  mustContain("NodeRestriction"),
		},
		"disable-admission-plugins": {
			reason: "NodeRestriction and PodSecurity enforce the tenant's node isolation and pod security defaults",
			check:  mustNotContain("NodeRestriction", "PodSecurity"),
		},
	},
	prefixes: map[string]string{
		"service-account-": "service-account tokens are signed and verified with kubefarm's key and issuer",
		"requestheader-":   "request headers let the front proxy assert any user; only kubefarm's front-proxy identity may",
	},
}

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

// APIServerFlags returns the kube-apiserver flags of a tenant.
func APIServerFlags(c *Cluster) ([]string, error) {
	d := map[string]string{
		"admission-control-config-file": configFile(ConfigKeyAdmission),
		"allow-privileged":              "true",
		"authorization-mode":            "Node,RBAC",
		"client-ca-file":                pkiFile(RoleCA, secretCertKey),
		"enable-admission-plugins":      "NodeRestriction",
		"enable-bootstrap-token-auth":   "true",
		"encryption-provider-config":    pkiFile(RoleEncryptionConfig, EncryptionConfigKey),
		"etcd-cafile":                   pkiFile(RoleEtcdCA, secretCertKey),
		"etcd-certfile":                 pkiFile(RoleAPIServerEtcdClient, secretCertKey),
		"etcd-keyfile":                  pkiFile(RoleAPIServerEtcdClient, secretPrivateKeyKey),
		"etcd-servers":                  strings.Join(c.EtcdClientURLs(), ","),
		"kubelet-client-certificate":    pkiFile(RoleAPIServerKubeletClient, secretCertKey),
		"kubelet-client-key":            pkiFile(RoleAPIServerKubeletClient, secretPrivateKeyKey),
		// Verify kubelets' serving certificates against the cluster CA: the
		// nodes get them through serving CSRs that kubefarm approves only
		// for the machine's own names and addresses, so an impostor on the
		// boot network cannot receive exec and log traffic.
		"kubelet-certificate-authority":      pkiFile(RoleCA, secretCertKey),
		"kubelet-preferred-address-types":    "InternalIP,ExternalIP,Hostname",
		"profiling":                          "false",
		"proxy-client-cert-file":             pkiFile(RoleFrontProxyClient, secretCertKey),
		"proxy-client-key-file":              pkiFile(RoleFrontProxyClient, secretPrivateKeyKey),
		"requestheader-allowed-names":        FrontProxyClientName,
		"requestheader-client-ca-file":       pkiFile(RoleFrontProxyCA, secretCertKey),
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-username-headers":     "X-Remote-User",
		"secure-port":                        strconv.Itoa(int(APIServerPort)),
		"service-account-issuer":             c.ServiceAccountIssuer(),
		// The private key: kube-apiserver derives the public key from it,
		// so one Secret key serves both flags.
		"service-account-key-file":         pkiFile(RoleServiceAccount, secretPrivateKeyKey),
		"service-account-signing-key-file": pkiFile(RoleServiceAccount, secretPrivateKeyKey),
		"service-cluster-ip-range":         c.ServiceCIDR.String(),
		// Graceful rollouts without failed requests: on SIGTERM the server
		// turns /readyz red and keeps serving for the delay, long enough
		// for the endpoints and kube-proxy to stop sending it new
		// connections; afterwards new requests get 429 with Retry-After,
		// which clients retry on another replica, while in-flight ones
		// finish. The pod's grace period covers both.
		"shutdown-delay-duration":   APIServerShutdownDelay.String(),
		"shutdown-send-retry-after": "true",
		"tls-cert-file":             pkiFile(RoleAPIServer, secretCertKey),
		"tls-private-key-file":      pkiFile(RoleAPIServer, secretPrivateKeyKey),
	}
	// Without an external IP the API server would advertise its pod IP,
	// which tenant nodes cannot reach; better to advertise nothing than a
	// wrong address, and the reconciler rebuilds once the IP is known.
	if a := c.AdvertiseAddress(); a.IsValid() {
		d["advertise-address"] = a.String()
	}
	if c.Konnectivity {
		d["egress-selector-config-file"] = configFile(ConfigKeyEgressSelector)
	}
	auditFlags(c.Audit, d)
	if c.ExposeType == v1alpha1.ExposeNodePort {
		// The add-ons write the kubernetes Service's endpoints with the
		// node port (KubernetesServiceEndpoints).
		d["endpoint-reconciler-type"] = "none"
	}
	return mergeFlags(d, apiServerPolicy, c.APIServerArgs, field.NewPath("spec", "apiServer", "extraArgs"))
}

// ServiceAccountIssuer is the issuer of the tenant's service-account tokens,
// the conventional in-cluster URL of the tenant API server.
func (c *Cluster) ServiceAccountIssuer() string {
	return "https://kubernetes.default.svc." + c.ClusterDomain
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
		// certificates with the cluster CA; this is the one place the CA
		// key is mounted.
		"cluster-signing-cert-file":        pkiFile(RoleCA, secretCertKey),
		"cluster-signing-key-file":         pkiFile(RoleCA, secretPrivateKeyKey),
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

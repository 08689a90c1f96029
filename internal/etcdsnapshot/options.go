package etcdsnapshot

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults of kubefarm-etcd's flags.
const (
	DefaultDialTimeout    = 10 * time.Second
	DefaultTimeout        = 10 * time.Minute
	DefaultDir            = "/backup"
	DefaultRetain         = 7
	DefaultTerminationLog = "/dev/termination-log"
	// DefaultDataDir is where a tenant's etcd members keep their data
	// (--data-dir in controllers/tenantcluster/desired's EtcdFlags; a test
	// holds the two together).
	DefaultDataDir = "/var/lib/etcd/data"
	// PodNameEnv names the member by default, as etcd's --name=$(POD_NAME)
	// does in the members' pod template.
	PodNameEnv = "POD_NAME"
)

// SnapshotOptions are the flags of `kubefarm-etcd snapshot`.
type SnapshotOptions struct {
	// Endpoints are client URLs, tried in order (see ParseEndpoints).
	Endpoints []string
	// CACert, Cert and Key are PEM files: the CA of etcd's serving
	// certificates, and the client certificate and key etcd's
	// --client-cert-auth asks for.
	CACert, Cert, Key string
	// DialTimeout bounds the Status call that picks an endpoint, per
	// endpoint; Timeout bounds the whole run.
	DialTimeout, Timeout time.Duration
	// Dir holds the snapshots; Prefix starts their names.
	Dir, Prefix string
	// Retain is how many snapshots of Prefix are left after a run.
	Retain int
	// S3 uploads the snapshot to a bucket after it is saved in Dir, and
	// applies retention there (S3Options.Enabled).
	S3 S3Options
	// KeysConfig (the tenant's rendered EncryptionConfiguration) and
	// KeysRecipients (a file of age recipients) make each snapshot whole:
	// its keys are sealed to the recipients into KeysName(snapshot) beside
	// it. Both or neither.
	KeysConfig, KeysRecipients string
}

// KeysEnabled says the run writes a key file beside its snapshot.
func (o SnapshotOptions) KeysEnabled() bool { return o.KeysConfig != "" || o.KeysRecipients != "" }

// Validate checks the options before anything is dialled or written.
func (o SnapshotOptions) Validate() error {
	var errs []error
	if len(o.Endpoints) == 0 {
		errs = append(errs, errors.New("--endpoints is required"))
	}
	for _, f := range []struct{ flag, path string }{{"--cacert", o.CACert}, {"--cert", o.Cert}, {"--key", o.Key}} {
		if f.path == "" {
			errs = append(errs, fmt.Errorf("%s is required: etcd serves TLS and asks for a client certificate", f.flag))
		}
	}
	if o.DialTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--dial-timeout must be positive, not %s", o.DialTimeout))
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout must be positive, not %s", o.Timeout))
	}
	if o.Dir == "" {
		errs = append(errs, errors.New("--dir is required"))
	}
	if err := ValidatePrefix(o.Prefix); err != nil {
		errs = append(errs, err)
	}
	if o.Retain < 1 {
		errs = append(errs, fmt.Errorf("--retain must be at least 1 (the snapshot just taken), not %d", o.Retain))
	}
	if err := o.S3.Validate(); err != nil {
		errs = append(errs, err)
	}
	if (o.KeysConfig == "") != (o.KeysRecipients == "") {
		errs = append(errs, errors.New("--keys-config and --keys-recipients go together: the keys of the one sealed to the other"))
	}
	return errors.Join(errs...)
}

// ParseEndpoints splits --endpoints into client URLs. Each must be
// https://host:port and nothing more: the members serve TLS only, an
// explicit port keeps the client from silently dialling 443, and a path
// would be ignored by the gRPC client.
func ParseEndpoints(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("--endpoints is required")
	}
	var out []string
	for raw := range strings.SplitSeq(s, ",") {
		ep := strings.TrimSpace(raw)
		if err := checkURL(ep, "https"); err != nil {
			return nil, fmt.Errorf("--endpoints: %w", err)
		}
		if slices.Contains(out, ep) {
			return nil, fmt.Errorf("--endpoints: %q is listed twice", ep)
		}
		out = append(out, ep)
	}
	return out, nil
}

// checkURL accepts scheme://host:port with one of the schemes and nothing
// else (no path, query, fragment or user), the shape etcd's own URL types
// accept, minus what they would silently drop.
func checkURL(s string, schemes ...string) error {
	if s == "" {
		return errors.New("empty URL")
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	if !slices.Contains(schemes, u.Scheme) {
		return fmt.Errorf("%q: scheme must be %s", s, strings.Join(schemes, " or "))
	}
	if u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || u.Path != "" {
		return fmt.Errorf("%q: only %s://host:port, nothing after the port", s, u.Scheme)
	}
	if u.String() != s {
		// etcd compares URLs as it spells them (a lowercase scheme, ...).
		return fmt.Errorf("%q: write it as %q", s, u.String())
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return fmt.Errorf("%q: host:port: %w", s, err)
	}
	if host == "" {
		return fmt.Errorf("%q: no host", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: port %q is not 1 to 65535", s, port)
	}
	return nil
}

// Member is one member of --initial-cluster.
type Member struct {
	Name     string
	PeerURLs []string
}

// memberNameRE: pod names and anything else a sane member name is. etcd
// itself reads --initial-cluster as a URL query, so '%', '+', '&', ';' and
// '=' in a name would be decoded or split differently from how they read.
var memberNameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`)

// ParseInitialCluster parses etcd's --initial-cluster:
// name=peerURL[,name=peerURL...], a name listed again for a second URL of
// the same member. It accepts a subset of what etcd accepts (the fuzz test
// holds it to that), so that a value that passes here is read by etcd the
// same way: peer URLs are http(s)://host:port, names avoid the characters
// etcd's query parsing decodes, and no URL belongs to two members.
func ParseInitialCluster(s string) ([]Member, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("--initial-cluster is required")
	}
	var members []Member
	seen := map[string]string{} // URL to member name
	for entry := range strings.SplitSeq(s, ",") {
		name, u, ok := strings.Cut(entry, "=")
		if !ok {
			return nil, fmt.Errorf("--initial-cluster: %q is not name=peerURL", entry)
		}
		if !memberNameRE.MatchString(name) {
			return nil, fmt.Errorf("--initial-cluster: member name %q: use letters, digits, '.', '_' and '-'", name)
		}
		if strings.ContainsAny(u, "%+&;= \t") {
			return nil, fmt.Errorf("--initial-cluster: peer URL %q of %s has characters etcd would decode", u, name)
		}
		if err := checkURL(u, "http", "https"); err != nil {
			return nil, fmt.Errorf("--initial-cluster: member %s: %w", name, err)
		}
		if other, dup := seen[u]; dup {
			return nil, fmt.Errorf("--initial-cluster: peer URL %s is given to %s and %s", u, other, name)
		}
		seen[u] = name
		i := slices.IndexFunc(members, func(m Member) bool { return m.Name == name })
		if i < 0 {
			members = append(members, Member{Name: name})
			i = len(members) - 1
		}
		members[i].PeerURLs = append(members[i].PeerURLs, u)
	}
	return members, nil
}

// RestoreOptions are the flags of `kubefarm-etcd restore`.
type RestoreOptions struct {
	// Snapshot is the snapshot file, as Save writes it (with etcd's sha256
	// trailer; a db file copied out of a data directory has none and is
	// refused).
	Snapshot string
	// DataDir is the member's etcd --data-dir.
	DataDir string
	// Name, InitialCluster, AdvertisePeerURLs and Token are the member's
	// etcd --name, --initial-cluster, --initial-advertise-peer-urls and
	// --initial-cluster-token: the restored data directory records the
	// membership they describe, and etcd refuses to start on it with
	// other values.
	Name              string
	InitialCluster    string
	AdvertisePeerURLs []string
	Token             string
	// InitialClusterState is the state the member is started with: only
	// "new" (or empty, for a restore by hand) restores. With "existing" the
	// cluster was bootstrapped already and a member without data must join
	// it, never come back with a snapshot's old data.
	InitialClusterState string
	// S3, when enabled, is where the snapshot is: Snapshot is then its name
	// after S3.Prefix, downloaded into FetchDir only when a restore will
	// happen, and removed after it.
	S3       S3Options
	FetchDir string
}

// Validate checks the options; every member of the restored cluster must
// be given the same InitialCluster and Token.
func (o RestoreOptions) Validate() error {
	var errs []error
	if o.Snapshot == "" {
		errs = append(errs, errors.New("--snapshot is required"))
	}
	if o.S3.Enabled() || o.FetchDir != "" {
		errs = append(errs, o.S3.Validate(), ValidateFetchName(o.Snapshot))
		if o.FetchDir == "" || !o.S3.Enabled() {
			errs = append(errs, errors.New("--s3-bucket and --fetch-dir go together"))
		}
	}
	if clean := filepath.Clean(o.DataDir); o.DataDir == "" || clean == "/" || clean == "." {
		errs = append(errs, fmt.Errorf("--data-dir %q: name the member's data directory, such as %s", o.DataDir, DefaultDataDir))
	}
	if o.Name == "" {
		errs = append(errs, fmt.Errorf("--name is required (default: $%s, which is unset)", PodNameEnv))
	}
	switch o.InitialClusterState {
	case "", "new", "existing":
	default:
		errs = append(errs, fmt.Errorf("--initial-cluster-state %q: must be new or existing", o.InitialClusterState))
	}
	if o.Token == "" {
		errs = append(errs, errors.New("--initial-cluster-token is required: the members' token (kubefarm: <namespace>-<name>)"))
	}
	for _, u := range o.AdvertisePeerURLs {
		if err := checkURL(u, "http", "https"); err != nil {
			errs = append(errs, fmt.Errorf("--initial-advertise-peer-urls: %w", err))
		}
	}
	if len(o.AdvertisePeerURLs) == 0 {
		errs = append(errs, errors.New("--initial-advertise-peer-urls is required"))
	}
	members, err := ParseInitialCluster(o.InitialCluster)
	if err != nil {
		errs = append(errs, err)
	} else if o.Name != "" && len(o.AdvertisePeerURLs) > 0 {
		if err := matchSelf(members, o.Name, o.AdvertisePeerURLs); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// matchSelf checks that the member is in the cluster with exactly its
// advertised peer URLs. etcd would compare them after resolving the host
// names; a member restoring before its own DNS name resolves cannot, so
// they must be spelled the same (as kubefarm's flags are, from one
// builder).
func matchSelf(members []Member, name string, advertise []string) error {
	i := slices.IndexFunc(members, func(m Member) bool { return m.Name == name })
	if i < 0 {
		return fmt.Errorf("--name %s is not a member of --initial-cluster", name)
	}
	want := slices.Clone(members[i].PeerURLs)
	got := slices.Clone(advertise)
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		return fmt.Errorf("--initial-advertise-peer-urls %s differ from %s's URLs in --initial-cluster (%s)",
			strings.Join(advertise, ","), name, strings.Join(members[i].PeerURLs, ","))
	}
	return nil
}

// SplitList splits a comma-separated flag value, dropping spaces around
// the items and empty items.
func SplitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

package server

// The components' configurations, derived from Options.

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/fetchguard"
	"github.com/kubefarm/kubefarm/pxe/bootpaths"
	"github.com/kubefarm/kubefarm/pxe/httpboot"
	"github.com/kubefarm/kubefarm/pxe/jointoken"
	"github.com/kubefarm/kubefarm/pxe/tftp"
)

// bootServer is where booting machines reach this replica.
type bootServer struct {
	// ip is --server-ip, 4 bytes.
	ip net.IP
	// httpPort is --http-port, or --http-addr's port.
	httpPort int
	// base is the root of every boot URL.
	base bootpaths.Base
}

// bootServer checks --server-ip, --http-addr and --http-port and derives
// the boot URLs' root from them.
func (o *Options) bootServer() (bootServer, error) {
	ip := net.ParseIP(o.ServerIP).To4()
	if ip == nil {
		return bootServer{}, fmt.Errorf("--server-ip %q is not an IPv4 address", o.ServerIP)
	}
	port := o.HTTPPort
	if port == 0 {
		_, p, err := net.SplitHostPort(o.HTTPAddr)
		if err != nil {
			return bootServer{}, fmt.Errorf("--http-addr: %w", err)
		}
		if port, err = strconv.Atoi(p); err != nil || port == 0 {
			return bootServer{}, fmt.Errorf("--http-addr %q needs an explicit port", o.HTTPAddr)
		}
	}
	return bootServer{ip: ip, httpPort: port, base: bootpaths.NewBase(ip, port)}, nil
}

// newScheme knows the kinds kubefarm-pxe reads and writes.
func newScheme() (*k8sruntime.Scheme, error) {
	scheme := k8sruntime.NewScheme()
	if err := kubefarmv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return scheme, nil
}

// cacheOptions are the informer cache's: --namespace for Machines and
// NodePools, --pod-namespace for the token issuer credentials.
func (o *Options) cacheOptions(scheme *k8sruntime.Scheme) cache.Options {
	copts := cache.Options{Scheme: scheme, DefaultTransform: trimCached}
	if o.Namespace != "" {
		copts.DefaultNamespaces = map[string]cache.Config{o.Namespace: {}}
		// BootImages are cluster-scoped; DefaultNamespaces does not apply.
	}
	if o.PodNamespace != "" {
		// Secrets only of this namespace, and only the credentials:
		// whatever --namespace says for Machines.
		copts = jointoken.CacheOptions(o.PodNamespace, copts)
	}
	return copts
}

// trimCached drops from every cached object what kubefarm-pxe never reads,
// before it is stored: managed fields everywhere (an update from a cached
// object without them leaves the server's as they are); and of NodePools
// the annotations, labels, owner references and finalizers (an ArgoCD or
// kubectl last-applied annotation alone is as large as the spec; nothing
// here selects by label or follows an owner) and spec.machines, the entries
// the NodePool controller turns into the Machines this server reads
// instead (250 per pool, copied whenever a pool is read from the cache). No
// NodePool is ever written back from the cache. Machines are not cached at
// all: pxe/inventory keeps a compact record of each.
func trimCached(obj any) (any, error) {
	if o, ok := obj.(metav1.Object); ok {
		o.SetManagedFields(nil)
	}
	if p, ok := obj.(*kubefarmv1.NodePool); ok {
		p.Annotations, p.Labels, p.OwnerReferences, p.Finalizers = nil, nil, nil, nil
		p.Spec.Machines = nil
	}
	return obj, nil
}

// storeConfig is the artifact cache's. Its guard refuses the defaults,
// --fetch-denied-cidrs but --fetch-allowed-cidrs, and the addresses of
// apiHost, the API server of kubefarm-pxe's rest.Config (in a pod, the
// kubernetes Service's address), resolved now.
func (o *Options) storeConfig(ctx context.Context, apiHost string) (httpboot.StoreConfig, error) {
	denied, err := fetchguard.ParsePrefixes("--fetch-denied-cidrs", o.FetchDeniedCIDRs)
	if err != nil {
		return httpboot.StoreConfig{}, err
	}
	allowed, err := fetchguard.ParsePrefixes("--fetch-allowed-cidrs", o.FetchAllowedCIDRs)
	if err != nil {
		return httpboot.StoreConfig{}, err
	}
	api, err := fetchguard.HostAddrs(ctx, nil, apiHost)
	if err != nil {
		return httpboot.StoreConfig{}, fmt.Errorf("the API server's addresses, which artifact fetches refuse: %w", err)
	}
	return httpboot.StoreConfig{
		Dir:     o.CacheDir,
		MaxSize: o.MaxArtifactSize,
		Guard:   fetchguard.New(fetchguard.Options{Denied: denied, Allowed: allowed, APIServer: api}),
		// Registry credentials come from the pod's docker config, if any;
		// anonymous otherwise.
		RemoteOptions: []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)},
		NameOptions:   nameOptions(o.InsecureRegistry),
	}, nil
}

func nameOptions(insecure bool) []name.Option {
	if insecure {
		return []name.Option{name.Insecure}
	}
	return nil
}

// tftpConfig is the TFTP service's.
func (o *Options) tftpConfig() tftp.Config {
	spin := o.TFTPSpinWait
	if spin == 0 {
		spin = -1 // the flag's 0 is "never"; the Config's zero is the default
	}
	return tftp.Config{Dir: o.IPXEDir, Timeout: o.TFTPTimeout, Retries: o.TFTPRetries, MaxTransfers: o.TFTPMaxTransfers,
		MaxWindowSize: o.TFTPMaxWindowSize, SpinWait: spin}
}

package httpboot

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// Machines is what the handler needs to know about the API's objects.
type Machines interface {
	// ByMAC finds the machine with a boot MAC (lower case, colon form).
	ByMAC(mac string) (*kubefarmv1.Machine, bool)
	// BootImage finds a cluster-scoped BootImage by name.
	BootImage(name string) (*kubefarmv1.BootImage, bool)
	// Pool finds a NodePool.
	Pool(namespace, name string) (*kubefarmv1.NodePool, bool)
	// ByIP finds the machine whose static address is ip (dotted quad):
	// artifacts are fetched by digest, so the peer's address is what ties
	// a download to a machine.
	ByIP(ip string) (*kubefarmv1.Machine, bool)
}

// readTimeout bounds one cache read. Reads are in memory once the
// informers have synced; the bound only matters before that, when the cache
// would otherwise block a request until the first list completes.
const readTimeout = 5 * time.Second

// kubefarm-pxe's cluster-wide permissions (make generate writes them to
// config/rbac-pxe/role.yaml, the chart's files/rbac/pxe-role.yaml): the
// cache lists and watches Machines, NodePools and BootImages (leases and
// boot scripts), and StatusRecorder patches Machines' status (a merge
// patch for boot reports, a server-side apply for heartbeats).
// +kubebuilder:rbac:groups=kubefarm.io,resources=machines;nodepools;bootimages,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubefarm.io,resources=machines/status,verbs=patch

// MachineSource finds Machines by boot MAC and by static IP: pxe/inventory's
// compact table, which holds every Machine of the farm in a fraction of
// what an informer cache of them would take. Either lookup answers no
// Machine for an address two Machines claim (which admission should
// prevent): booting either could hand a node the wrong identity.
type MachineSource interface {
	ByMAC(mac string) (*kubefarmv1.Machine, bool)
	ByIP(ip string) (*kubefarmv1.Machine, bool)
}

// CacheMachines implements Machines: Machines from a MachineSource,
// NodePools and BootImages (a few per tenant) from a controller-runtime
// cache.
type CacheMachines struct {
	MachineSource
	cache cache.Cache
	log   logr.Logger
}

// NewCacheMachines registers the informers it reads on c. Call it before
// c.Start, so that the first boot request reads a synced cache instead of
// lazily starting a watch and blocking on its first list.
func NewCacheMachines(ctx context.Context, c cache.Cache, machines MachineSource, log logr.Logger) (*CacheMachines, error) {
	for _, o := range []client.Object{&kubefarmv1.NodePool{}, &kubefarmv1.BootImage{}} {
		if _, err := c.GetInformer(ctx, o, cache.BlockUntilSynced(false)); err != nil {
			return nil, fmt.Errorf("informer for %T: %w", o, err)
		}
	}
	return &CacheMachines{MachineSource: machines, cache: c, log: log}, nil
}

// BootImage reads one BootImage from the cache.
func (c *CacheMachines) BootImage(name string) (*kubefarmv1.BootImage, bool) {
	var b kubefarmv1.BootImage
	return &b, c.get(types.NamespacedName{Name: name}, &b)
}

// Pool reads one NodePool from the cache.
func (c *CacheMachines) Pool(namespace, name string) (*kubefarmv1.NodePool, bool) {
	var p kubefarmv1.NodePool
	return &p, c.get(types.NamespacedName{Namespace: namespace, Name: name}, &p)
}

func (c *CacheMachines) get(key types.NamespacedName, obj client.Object) bool {
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	if err := c.cache.Get(ctx, key, obj); err != nil {
		if client.IgnoreNotFound(err) != nil {
			c.log.Error(err, "reading from cache", "kind", fmt.Sprintf("%T", obj), "key", key.String())
		}
		return false
	}
	return true
}

// StatusRecorder writes what kubefarm-pxe records in Machines' status.
//
// RecordBoot writes status.lastBoot and the conditions of the boot
// (NetworkVerified, and RebootRequired False for a new boot) with one
// merge patch on the status subresource, so the conditions always refer to
// the boot in lastBoot. A merge patch replaces the whole conditions list,
// so the patch carries the resourceVersion it was computed from
// (optimistic lock): a condition another controller wrote meanwhile makes
// it fail with a conflict (the agent's retry then starts from the updated
// cache) instead of being overwritten.
//
// RequireReboot (heartbeat.go) applies the RebootRequired condition alone.
type StatusRecorder struct {
	Client client.Client
}

// RecordBoot implements BootRecorder.
func (s StatusRecorder) RecordBoot(ctx context.Context, m *kubefarmv1.Machine, rec kubefarmv1.BootRecord, network metav1.Condition, also ...metav1.Condition) error {
	patched := m.DeepCopy()
	patched.Status.LastBoot = &rec
	meta.SetStatusCondition(&patched.Status.Conditions, network)
	for _, c := range also {
		meta.SetStatusCondition(&patched.Status.Conditions, c)
	}
	return s.Client.Status().Patch(ctx, patched, client.MergeFromWithOptions(m, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner))
}

// RecordCredential implements BootRecorder: a merge patch of
// status.bootCredential alone, without a resourceVersion, since no other
// writer touches that field and the secret is already minted.
func (s StatusRecorder) RecordCredential(ctx context.Context, m *kubefarmv1.Machine, c kubefarmv1.BootCredential) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"bootCredential": c}})
	if err != nil {
		return err
	}
	obj := &kubefarmv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name}}
	return s.Client.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldOwner))
}

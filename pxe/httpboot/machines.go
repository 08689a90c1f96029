package httpboot

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
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

// CacheMachines implements Machines over a controller-runtime cache, with
// its own index of Machines by MAC and IP (addressIndex) instead of cache
// field indexes: those keep a set per value, twice (per namespace and for
// all), which for a farm's unique addresses cost more memory than the
// Machines themselves.
type CacheMachines struct {
	cache   cache.Cache
	log     logr.Logger
	addrs   *addressIndex
	handler toolscache.ResourceEventHandlerRegistration
}

// NewCacheMachines registers the informers it reads and the address index's
// handler on c. Call it before c.Start, so that the first boot request
// reads a synced cache instead of lazily starting a watch and blocking on
// its first list.
func NewCacheMachines(ctx context.Context, c cache.Cache, log logr.Logger) (*CacheMachines, error) {
	for _, o := range []client.Object{&kubefarmv1.NodePool{}, &kubefarmv1.BootImage{}} {
		if _, err := c.GetInformer(ctx, o, cache.BlockUntilSynced(false)); err != nil {
			return nil, fmt.Errorf("informer for %T: %w", o, err)
		}
	}
	mi, err := c.GetInformer(ctx, &kubefarmv1.Machine{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("machine informer: %w", err)
	}
	cm := &CacheMachines{cache: c, log: log, addrs: newAddressIndex()}
	machineOf := func(obj any) *kubefarmv1.Machine {
		if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		m, _ := obj.(*kubefarmv1.Machine)
		return m
	}
	cm.handler, err = mi.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { cm.addrs.add(machineOf(obj)) },
		UpdateFunc: func(old, obj any) {
			// Most updates are status (boot reports, heartbeats): they
			// leave the index, and its lock, alone.
			if o, n := machineOf(old), machineOf(obj); !sameAddresses(o, n) {
				cm.addrs.remove(o)
				cm.addrs.add(n)
			}
		},
		DeleteFunc: func(obj any) { cm.addrs.remove(machineOf(obj)) },
	})
	if err != nil {
		return nil, fmt.Errorf("indexing machines by address: %w", err)
	}
	return cm, nil
}

// HasSynced says whether every Machine of the informer's initial list is in
// the address index.
func (c *CacheMachines) HasSynced() bool { return c.handler.HasSynced() }

// ByMAC is a lookup in the address index, O(1) in the number of machines.
// Two machines claiming one MAC (which admission should prevent) is
// treated as unknown: booting either could hand a node the wrong identity.
func (c *CacheMachines) ByMAC(mac string) (*kubefarmv1.Machine, bool) {
	return c.unique("mac", mac, c.addrs.ownersOfMAC(mac))
}

// ByIP is a lookup in the address index. Pools in different namespaces may
// reuse an address on separate networks; an address that is not unique
// names no machine.
func (c *CacheMachines) ByIP(ip string) (*kubefarmv1.Machine, bool) {
	return c.unique("ip", ip, c.addrs.ownersOfIP(ip))
}

func (c *CacheMachines) unique(kind, addr string, owners []types.NamespacedName) (*kubefarmv1.Machine, bool) {
	switch len(owners) {
	case 1:
		var m kubefarmv1.Machine
		return &m, c.get(owners[0], &m)
	case 0:
		return nil, false
	default:
		c.log.Info("several machines claim one address; not serving it as any of them", kind, addr, "machines", len(owners))
		return nil, false
	}
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

package dynamic

// RELEASE and DECLINE: a client giving its address back, or refusing it
// because another host answers for it.

import (
	"context"
	"fmt"
	"net"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// Release deletes mac's lease on ip (precondition on UID/resourceVersion); absent is not an error.
func (a *Allocator) Release(ctx context.Context, mac net.HardwareAddr, ip net.IP) error {
	return a.eachLease(ctx, mac, ip, func(ctx context.Context, _ *pool, key types.NamespacedName) error {
		// Not mac's, or declined (held for the host that squats on it):
		// changeOwn leaves it.
		return a.changeOwn(ctx, key, mac, "release", func(cur *kubefarmv1.DHCPLease) error {
			uid, rv := cur.UID, cur.ResourceVersion
			err := a.client.Delete(ctx, cur, client.Preconditions{UID: &uid, ResourceVersion: &rv})
			if err == nil {
				a.written.deleted(client.ObjectKeyFromObject(cur), rv)
			}
			return err
		})
	})
}

// eachLease runs fn on the lease object of ip in every catch-all pool whose
// range holds it: RELEASE and DECLINE name an address, not a pool. A
// malformed address or MAC is nothing to act on.
func (a *Allocator) eachLease(ctx context.Context, mac net.HardwareAddr, ip net.IP,
	fn func(context.Context, *pool, types.NamespacedName) error) error {
	ip = ip.To4()
	if ip == nil || len(mac) != 6 {
		return nil
	}
	pools, err := a.catchAllPools(ctx)
	if err != nil {
		return err
	}
	for _, p := range pools {
		if !p.rng.Contains(ip) {
			continue
		}
		if err := fn(ctx, p, types.NamespacedName{Namespace: p.namespace, Name: LeaseName(p.name, ip)}); err != nil {
			return err
		}
	}
	return nil
}

// Decline records that mac declined ip (DHCPDECLINE: another host answers
// ARP for it): the lease is marked declined and held for one lease time,
// during which the address is offered to nobody, mac included, whose next
// DISCOVER therefore gets another address. A lease that is not mac's is
// left alone: only the client that was given the address may decline it.
func (a *Allocator) Decline(ctx context.Context, mac net.HardwareAddr, ip net.IP) error {
	return a.eachLease(ctx, mac, ip, func(ctx context.Context, p *pool, key types.NamespacedName) error {
		return a.changeOwn(ctx, key, mac, "decline", func(cur *kubefarmv1.DHCPLease) error {
			cur.Spec.Declined = true
			// The client gave the address back: it is bound to nobody.
			cur.Spec.BoundTime = nil
			cur.Spec.ExpireTime = metav1.NewTime(a.now().Add(p.netw.LeaseTime))
			err := a.client.Update(ctx, cur)
			if err == nil {
				a.written.wrote(cur)
			}
			return err
		})
	})
}

// changeOwn writes mac's lease at key: write gets the object as the API
// server holds it and updates or deletes it with that resourceVersion; a
// conflict (renewed or taken over since the read) reads it again, three
// times at most. A lease that is gone, not mac's, or declined is left alone.
// what names the change in errors.
func (a *Allocator) changeOwn(ctx context.Context, key types.NamespacedName, mac net.HardwareAddr, what string,
	write func(*kubefarmv1.DHCPLease) error) error {
	for range 3 {
		var cur kubefarmv1.DHCPLease
		if err := a.api.Get(ctx, key, &cur); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("reading DHCPLease %s: %w", key, err)
		}
		if cur.Spec.MAC != mac.String() || cur.Spec.Declined {
			return nil
		}
		err := write(&cur)
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case apierrors.IsConflict(err):
			continue
		default:
			return fmt.Errorf("DHCPLease %s: %s: %w", key, what, err)
		}
	}
	return fmt.Errorf("DHCPLease %s kept changing under three attempts to %s it", key, what)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// sideBySideResult is the -side-by-side run: n tenants created at once,
// each one's seconds to Ready and idle memory, and the sum.
type sideBySideResult struct {
	Tenants      int          `json:"tenants"`
	ReadySeconds []float64    `json:"readySeconds"`
	Memory       []*podMemory `json:"memory"`
	TotalMiB     float64      `json:"totalMiB"`
}

// sideBySide creates n tenants at once (each in its own namespace, with its
// own volume), waits until all are Ready, lets them settle for
// b.memorySettle, records each one's memory, and tears all of them down.
func (b *bench) sideBySide(ctx context.Context, n int) (res sideBySideResult, retErr error) {
	type tenant struct {
		ns *corev1.Namespace
		tc *kubefarmv1.TenantCluster
		pv *corev1.PersistentVolume
	}
	tenants := make([]tenant, 0, n)
	defer func() {
		tctx, cancel := context.WithTimeout(context.Background(), b.teardownTimeout)
		defer cancel()
		var wg sync.WaitGroup
		errs := make([]error, len(tenants))
		for i, t := range tenants {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = b.teardown(tctx, t.tc, t.ns, t.pv)
			}()
		}
		wg.Wait()
		retErr = errors.Join(append([]error{retErr}, errs...)...)
	}()
	start := time.Now()
	for range n {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-side-", Labels: map[string]string{"kubefarm.io/bench": "ready"}}}
		if err := b.c.Create(ctx, ns); err != nil {
			return res, fmt.Errorf("creating a namespace: %w", err)
		}
		t := tenant{ns: ns, tc: b.tenant(ns.Name)}
		tenants = append(tenants, t)
		if b.ownVolumes {
			pv, err := b.createVolume(ctx, ns.Name)
			if err != nil {
				return res, err
			}
			tenants[len(tenants)-1].pv = pv
		}
		if err := b.c.Create(ctx, t.tc); err != nil {
			return res, fmt.Errorf("creating TenantCluster %s/%s: %w", ns.Name, t.tc.Name, err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	res.Tenants = n
	for _, t := range tenants {
		last, err := b.waitReady(rctx, t.tc, func(string) {})
		if err != nil {
			return res, fmt.Errorf("TenantCluster %s never became Ready: %w%s%s", t.ns.Name, err, describe(last), b.describePods(t.ns.Name))
		}
		res.ReadySeconds = append(res.ReadySeconds, time.Since(start).Seconds())
	}
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(b.memorySettle):
	}
	for _, t := range tenants {
		m, err := b.readMemory(ctx, t.ns.Name)
		if err != nil {
			return res, err
		}
		res.Memory = append(res.Memory, m)
		res.TotalMiB += m.TotalMiB
	}
	return res, nil
}

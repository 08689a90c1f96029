package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// podMemory is what a tenant's control plane holds once idle: the working
// set (what the kubelet's eviction and `kubectl top` count) of each
// container, summed per container name over the tenant's pods, in MiB.
type podMemory struct {
	TotalMiB    float64            `json:"totalMiB"`
	ByContainer map[string]float64 `json:"byContainerMiB"`
	Pods        int                `json:"pods"`
	// CPU is the containers' CPU use in millicores as the kubelet last
	// sampled it (its usageNanoCores), summed the same way: what an idle
	// control plane burns.
	CPUMillicores  float64            `json:"cpuMillicores"`
	CPUByContainer map[string]float64 `json:"cpuByContainerMillicores"`
}

func (m *podMemory) byContainer() string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(m.ByContainer)) {
		parts = append(parts, fmt.Sprintf("%s=%.0f", name, m.ByContainer[name]))
	}
	cpu := make([]string, 0, len(m.CPUByContainer))
	for _, name := range slices.Sorted(maps.Keys(m.CPUByContainer)) {
		cpu = append(cpu, fmt.Sprintf("%s=%.0f", name, m.CPUByContainer[name]))
	}
	return "(" + strings.Join(parts, " ") + fmt.Sprintf(") cpu=%.0fm (", m.CPUMillicores) + strings.Join(cpu, " ") + ")"
}

// statsSummary is the part of the kubelet's /stats/summary read here.
type statsSummary struct {
	Pods []struct {
		PodRef struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"podRef"`
		Containers []struct {
			Name   string `json:"name"`
			Memory *struct {
				WorkingSetBytes *uint64 `json:"workingSetBytes"`
			} `json:"memory"`
			CPU *struct {
				UsageNanoCores *uint64 `json:"usageNanoCores"`
			} `json:"cpu"`
		} `json:"containers"`
	} `json:"pods"`
}

// idleMemory waits b.memorySettle (start-up work such as the API server's
// bootstrap of its own objects and the first add-on applies is over by
// then), then reads the kubelet's stats summary of every node running one
// of the namespace's pods, through the API server's node proxy as
// metrics-server does.
func (b *bench) idleMemory(ctx context.Context, namespace string) (*podMemory, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(b.memorySettle):
	}
	return b.readMemory(ctx, namespace)
}

// readMemory reads the namespace's pods' working sets now.
func (b *bench) readMemory(ctx context.Context, namespace string) (*podMemory, error) {
	pods := &corev1.PodList{}
	if err := b.c.List(ctx, pods, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	nodes := map[string]bool{}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			nodes[p.Spec.NodeName] = true
		}
	}
	m := &podMemory{ByContainer: map[string]float64{}, CPUByContainer: map[string]float64{}}
	for node := range nodes {
		raw, err := b.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "stats", "summary").DoRaw(ctx)
		if err != nil {
			return nil, fmt.Errorf("the stats summary of node %s: %w", node, err)
		}
		var sum statsSummary
		if err := json.Unmarshal(raw, &sum); err != nil {
			return nil, fmt.Errorf("the stats summary of node %s: %w", node, err)
		}
		for _, p := range sum.Pods {
			if p.PodRef.Namespace != namespace {
				continue
			}
			m.Pods++
			for _, c := range p.Containers {
				if c.CPU != nil && c.CPU.UsageNanoCores != nil {
					mc := float64(*c.CPU.UsageNanoCores) / 1e6
					m.CPUByContainer[c.Name] += mc
					m.CPUMillicores += mc
				}
				if c.Memory == nil || c.Memory.WorkingSetBytes == nil {
					continue
				}
				mib := float64(*c.Memory.WorkingSetBytes) / (1 << 20)
				m.ByContainer[c.Name] += mib
				m.TotalMiB += mib
			}
		}
	}
	if m.Pods == 0 {
		return nil, fmt.Errorf("no pod of %s in the kubelets' stats summaries", namespace)
	}
	return m, nil
}

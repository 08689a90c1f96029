//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// logImagePulls prints, per node, every image pull the tenant's kubelets
// reported (their Pulled Events: the image, how long, how much). On the
// netbooted machines each boot starts with an empty image store, and the
// pulls are where a rebooted node spends its minutes under TCG: this is the
// record that says which images to look at, run after run.
//
// It runs in a cleanup, after the scenario's context ended: its own bound.
func logImagePulls(t *testing.T, tenant kubernetes.Interface) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events, err := tenant.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "reason=Pulled"})
	if err != nil {
		t.Logf("image pulls: cannot list the tenant's Pulled Events: %v", err)
		return
	}
	t.Logf("image pulls the tenant's kubelets reported:%s", pullReport(events.Items))
}

// pullReport orders the pulls by node, then time; an image already present
// says nothing about pulls and is left out.
func pullReport(events []corev1.Event) string {
	type pull struct {
		node string
		at   time.Time
		msg  string
	}
	var pulls []pull
	for _, e := range events {
		if !strings.HasPrefix(e.Message, "Successfully pulled") {
			continue
		}
		at := e.LastTimestamp.Time
		if at.IsZero() {
			at = e.EventTime.Time
		}
		pulls = append(pulls, pull{e.Source.Host, at, e.Message})
	}
	sort.SliceStable(pulls, func(i, j int) bool {
		if pulls[i].node != pulls[j].node {
			return pulls[i].node < pulls[j].node
		}
		return pulls[i].at.Before(pulls[j].at)
	})
	if len(pulls) == 0 {
		return " none"
	}
	var b strings.Builder
	for _, p := range pulls {
		fmt.Fprintf(&b, "\n  %s %s  %s", p.node, p.at.UTC().Format("15:04:05"), p.msg)
	}
	return b.String()
}

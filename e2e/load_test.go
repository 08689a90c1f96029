//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// apiLoad is a loop of real API calls against a tenant API server, the way
// a controller or kubectl in the tenant would make them: a read and a write
// each round, through one client-go client (so one connection pool, which a
// rollout must move off old API servers without failing a call). It counts
// every call and keeps the first errors.
type apiLoad struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	ok     int
	failed int
	errs   []string
}

const loadConfigMap = "e2e-load"

// startLoad starts the loop; stop ends it and returns its counts.
func startLoad(t *testing.T, cfg *rest.Config) *apiLoad {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 30 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &apiLoad{cancel: cancel, done: make(chan struct{})}
	_, err = cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: loadConfigMap}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating the load ConfigMap: %v", err)
	}
	go func() {
		defer close(l.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			l.record(ctx, "get namespace default", err)
			patch := fmt.Sprintf(`{"data":{"round":%q}}`, strconv.Itoa(i))
			_, err = cs.CoreV1().ConfigMaps("default").Patch(ctx, loadConfigMap, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			l.record(ctx, "patch configmap", err)
		}
	}()
	return l
}

func (l *apiLoad) record(ctx context.Context, what string, err error) {
	if ctx.Err() != nil {
		return // stopping: a call cut short by stop is not a failure
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		l.ok++
		return
	}
	l.failed++
	if len(l.errs) < 10 {
		l.errs = append(l.errs, fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05.000"), what, err))
	}
}

// stop ends the loop and returns how many calls succeeded and failed, and
// the first errors.
func (l *apiLoad) stop() (ok, failed int, errs []string) {
	l.cancel()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok, l.failed, l.errs
}

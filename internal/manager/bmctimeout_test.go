package manager_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kubefarm/kubefarm/internal/manager"
)

// TestNewRefusesABMCTimeoutOutOfRange: a program that builds Options
// itself (not through --bmc-timeout, which refuses these at parsing) gets
// the same refusal, naming the field and the flag. No API server is
// contacted before it.
func TestNewRefusesABMCTimeoutOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		timeout time.Duration
		wantErr string
	}{
		{-time.Second, "negative"},
		{5*time.Minute + time.Second, "above the maximum 5m0s"},
	} {
		_, err := manager.New(&rest.Config{Host: "https://127.0.0.1:1"}, manager.Options{
			BMCTimeout: tc.timeout, MetricsAddr: "0", ProbeAddr: "0",
		})
		if err == nil || !strings.Contains(err.Error(), "Options.BMCTimeout (--bmc-timeout)") ||
			!strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("New with BMCTimeout %s = %v, want an error naming Options.BMCTimeout and saying %q", tc.timeout, err, tc.wantErr)
		}
	}
}

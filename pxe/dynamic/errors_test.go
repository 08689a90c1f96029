package dynamic

import (
	"errors"
	"fmt"
	"testing"

	"github.com/kubefarm/kubefarm/pxe/dhcp"
)

// TestErrorsNameTheirOutcome: the DHCP server tells the allocator's errors
// apart only by the outcome they name (it imports no allocator), so each
// must name the one docs/dhcp.md promises, also when wrapped as the
// allocator wraps it.
func TestErrorsNameTheirOutcome(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want dhcp.Outcome
	}{
		{ErrNoPool, dhcp.IgnoredUnknown},      // ignored, as without ranges
		{ErrRangeFull, dhcp.IgnoredRangeFull}, // ignored and counted
		{ErrNotLeased, dhcp.Nak},              // someone else's address
		{ErrNoRecord, dhcp.IgnoredUnknown},    // silence, RFC 2131 4.3.2
	} {
		wrapped := fmt.Errorf("%w: pool farm/rack1", tt.err)
		var oe *dhcp.OutcomeError
		if !errors.As(wrapped, &oe) || oe.Outcome != tt.want {
			t.Errorf("%v: outcome %v, want %s", tt.err, oe, tt.want)
		}
		if !errors.Is(wrapped, tt.err) {
			t.Errorf("%v: errors.Is no longer finds it", tt.err)
		}
	}
}

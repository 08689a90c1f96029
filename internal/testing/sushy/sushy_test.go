package sushy

import (
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

// TestEmulator shows the harness's promises: the service lists only its
// machine, over TLS verified by the harness's CA, with basic
// authentication, and the machine starts off and is a libvirt domain.
func TestEmulator(t *testing.T) {
	e := Start(t)
	var sys struct {
		PowerState string
		Boot       struct {
			BootSourceOverrideTarget string
		}
	}
	if err := e.Get(e.SystemPath, &sys); err != nil {
		t.Fatal(err)
	}
	if sys.PowerState != "Off" {
		t.Errorf("PowerState = %q, want Off before anything powered it on", sys.PowerState)
	}
	if got := e.DomainState(t); got != "shut off" {
		t.Errorf("virsh domstate = %q, want shut off", got)
	}
	wrong := *e
	wrong.Password = "not-" + e.Password
	if err := wrong.Get(e.SystemPath, &sys); err == nil {
		t.Error("a wrong password read the system")
	}
}

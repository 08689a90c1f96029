package bootchain

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// refuse boots v, an x86 machine whose pool serves an arm64 image: real
// iPXE runs kubefarm-pxe's script, whose architecture check must stop it
// before it fetches anything, with its reason on the console. The proof is
// on the wire (the script is the only HTTP request) and in the server's
// counters (no artifact, no boot secret served).
func (c *chain) refuse(t *testing.T, v vm) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	before := c.metrics(t)
	run := c.startVM(t, v)
	want := "kubefarm: BootImage " + c.images[v.name].Name + " is for arm64, this machine's iPXE is x86_64"
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		select {
		case err := <-run.exit:
			run.done = true
			return false, fmt.Errorf("qemu exited: %v", err)
		default:
		}
		b, err := os.ReadFile(run.console)
		return err == nil && strings.Contains(string(b), want), nil
	})
	if err != nil {
		t.Fatalf("the console never said %q: %v", want, err)
	}
	run.stop()
	hw, _ := net.ParseMAC(v.mac)
	tr, err := readPcap(run.capture, hw)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s on the wire:\n%s", v.name, tr)
	script := "GET /boot/" + v.mac + ".ipxe "
	var scripts int
	for _, r := range tr.HTTPRequests {
		if strings.HasPrefix(r, script) {
			scripts++
			continue
		}
		t.Errorf("%s asked %q after its script refused the image", v.name, r)
	}
	if scripts == 0 {
		t.Errorf("%s never asked for its script (HTTP requests: %q)", v.name, tr.HTTPRequests)
	}
	after := c.metrics(t)
	for _, route := range []string{"artifacts", "secret"} {
		series := `kubefarm_pxe_http_requests_total{code="200",route="` + route + `"}`
		if got := after[series] - before[series]; got != 0 {
			t.Errorf("%s: %v served to the misplaced machine", series, got)
		}
	}
	if got := after[`kubefarm_pxe_http_requests_total{code="200",route="boot"}`] - before[`kubefarm_pxe_http_requests_total{code="200",route="boot"}`]; got < 1 {
		t.Errorf("no boot script served (%v)", got)
	}
}

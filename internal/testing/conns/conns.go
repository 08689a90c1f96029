// Package conns helps tests watch a server close a connection: the HTTP
// boot service's limits (pxe/httplimit, cmd/kubefarm-pxe) cut slow or
// surplus clients, and a test must see the cut without sleeping.
package conns

import (
	"errors"
	"net"
	"testing"
	"time"
)

// WaitClosed reads from c until the server closes it (EOF or a reset),
// failing the test after d. Reads time out every 20ms, and between them
// between runs when set (e.g. to keep dribbling header bytes).
func WaitClosed(t testing.TB, c net.Conn, d time.Duration, between func()) {
	t.Helper()
	deadline := time.Now().Add(d)
	buf := make([]byte, 512)
	for time.Now().Before(deadline) {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, err := c.Read(buf)
		var ne net.Error
		switch {
		case err == nil:
		case errors.As(err, &ne) && ne.Timeout():
			if between != nil {
				between()
			}
		default:
			return // io.EOF or a reset: closed
		}
	}
	t.Fatalf("the server did not close the connection within %s", d)
}

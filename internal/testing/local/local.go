// Package local hands tests what they make on this host for themselves: a
// loopback port nobody listens on, and random secrets for the users of the
// servers they start. Every harness under internal/testing uses it rather
// than a copy of its own.
package local

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"testing"
)

// TCPPort is a TCP port on 127.0.0.1 that was free a moment ago.
func TCPPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// UDPPort is a UDP port on 127.0.0.1 that was free a moment ago.
func UDPPort(t testing.TB) int {
	t.Helper()
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// RandomHex is n random bytes in hex: a password or a name no other run
// shares.
func RandomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

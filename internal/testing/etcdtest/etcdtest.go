// Package etcdtest holds what the tests that run real etcd processes share:
// the pinned etcd binary, free loopback ports and a throw-away PKI. It is
// imported by tests only.
package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kubefarm/kubefarm/internal/testing/local"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// Binary is the pinned etcd that `make envtest-tools` builds, as the
// integration tests use it (internal/testing/testenv): missing is a failure that
// says how to build it, never a skip.
func Binary(t testing.TB) string {
	t.Helper()
	return testenv.PinnedBinary(t, "etcd")
}

// FreePort is a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	return local.TCPPort(t)
}

// PKI is a throw-away CA with a certificate for etcd (serving and peer, for
// 127.0.0.1) and a client certificate, as PEM files.
type PKI struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
	// KeyPEMs are the private keys' bytes, which no output may contain.
	KeyPEMs [][]byte
	// Client is the client certificate's TLS configuration.
	Client *tls.Config
}

// NewPKI writes a new PKI into a temporary directory of t.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	p := &PKI{}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test etcd CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) (string, []byte) {
		path := filepath.Join(dir, name)
		b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if typ == "PRIVATE KEY" {
			p.KeyPEMs = append(p.KeyPEMs, b)
		}
		return path, b
	}
	p.CA, _ = write("ca.crt", "CERTIFICATE", caDER)
	leaf := func(name string, serial int64, usage []x509.ExtKeyUsage, ips []net.IP) (certPath, keyPath string, pair tls.Certificate) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certPath, certPEM := write(name+".crt", "CERTIFICATE", der)
		keyPath, keyPEM := write(name+".key", "PRIVATE KEY", keyDER)
		if pair, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
			t.Fatal(err)
		}
		return certPath, keyPath, pair
	}
	p.ServerCert, p.ServerKey, _ = leaf("etcd", 2, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, []net.IP{net.IPv4(127, 0, 0, 1)})
	var client tls.Certificate
	p.ClientCert, p.ClientKey, client = leaf("kubefarm-etcd-backup", 3, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	p.Client = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{client}, MinVersion: tls.VersionTLS12}
	return p
}

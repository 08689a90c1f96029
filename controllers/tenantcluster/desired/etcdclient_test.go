package desired

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

func TestEtcdClientTLS(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kube-apiserver-etcd-client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	c := resolveTC(t)
	good := func() SecretData {
		return SecretData{
			"alpha-etcd-ca":               {"tls.crt": certPEM},
			"alpha-apiserver-etcd-client": {"tls.crt": certPEM, "tls.key": keyPEM},
		}
	}
	cfg, err := EtcdClientTLS(c, good())
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Certificates) != 1 || cfg.RootCAs == nil || cfg.MinVersion != tls.VersionTLS12 || cfg.InsecureSkipVerify {
		t.Errorf("TLS config %+v", cfg)
	}
	for _, tt := range []struct {
		name   string
		modify func(SecretData)
		want   string
	}{
		{"no etcd CA", func(d SecretData) { delete(d, "alpha-etcd-ca") }, "alpha-etcd-ca"},
		{"no client key", func(d SecretData) { delete(d["alpha-apiserver-etcd-client"], "tls.key") }, "alpha-apiserver-etcd-client"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := good()
			tt.modify(d)
			if _, err := EtcdClientTLS(c, d); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one naming %s", err, tt.want)
			}
		})
	}
}

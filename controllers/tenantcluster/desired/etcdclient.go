package desired

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
)

// EtcdClientTLS is how the controller reaches etcd to change its
// membership: as the API servers do, with their etcd client certificate,
// trusting the tenant's etcd CA only. Member 0's client URL is
// EtcdClientURL(0).
func EtcdClientTLS(c *Cluster, secrets SecretData) (*tls.Config, error) {
	// The CA as the API servers mount it: its trust bundle once it was
	// rotated, so the controller trusts what they trust.
	caName, clientName := c.volumeSecretName(RoleEtcdCA), c.SecretName(RoleAPIServerEtcdClient)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(secrets[caName][secretCertKey]) {
		return nil, fmt.Errorf("secret %s: no etcd CA certificate in %s", caName, secretCertKey)
	}
	pair, err := tls.X509KeyPair(secrets[clientName][secretCertKey], secrets[clientName][secretPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("secret %s: the etcd client certificate: %w", clientName, err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// Package restconfig says when two REST configs of a tenant's API server
// connect as the same identity, so that whatever the manager keeps per
// tenant (a client, a watch) is rebuilt exactly when the credential changes:
// a renewed certificate, a recreated PKI, a new address.
package restconfig

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"k8s.io/client-go/rest"
)

// Fingerprint hashes what a tenant connection is made from: the address and
// the TLS identity (the manager's tenant configs carry nothing else that
// varies). Each value is length-prefixed, so no two configs share a hash by
// concatenation.
func Fingerprint(cfg *rest.Config) [sha256.Size]byte {
	h := sha256.New()
	for _, b := range [][]byte{[]byte(cfg.Host), cfg.CAData, cfg.CertData, cfg.KeyData} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// FingerprintString is Fingerprint in hex, for logs and status.
func FingerprintString(cfg *rest.Config) string {
	fp := Fingerprint(cfg)
	return hex.EncodeToString(fp[:])
}

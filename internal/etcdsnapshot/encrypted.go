package etcdsnapshot

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/kubefarm/kubefarm/internal/backupkeys"
)

// maxEncryptionKeys bounds the distinct (provider, key) pairs a snapshot
// may show; kubefarm's tenants use one to three.
const maxEncryptionKeys = 64

// encryptedPrefix starts every value an encryption provider wrote.
var encryptedPrefix = []byte("k8s:enc:")

// EncryptedValues reads the snapshot file at path (Verify it first: bbolt
// maps the file, and a truncated one can crash the process) and returns,
// for each provider and key the values in it were encrypted with, the
// first such value (what follows the `k8s:enc:<provider>:<version>:<key>:`
// prefix), in the order met. A restore's preflight tries each
// against the keys it has, so that a snapshot whose keys are missing or
// wrong is refused before any member starts. Values in the clear are not
// listed; every revision the file holds is read.
func EncryptedValues(path string) ([]backupkeys.Sample, error) {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	defer db.Close()
	var out []backupkeys.Sample
	seen := map[[2]string]bool{}
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("key"))
		if b == nil {
			return errors.New("no key bucket: not an etcd v3 database")
		}
		return b.ForEach(func(_, v []byte) error {
			var kv mvccpb.KeyValue
			if err := proto.Unmarshal(v, &kv); err != nil {
				return fmt.Errorf("a stored key-value does not decode: %w", err)
			}
			ev, ok := parseEncrypted(kv.Value)
			if !ok {
				return nil
			}
			id := [2]string{ev.Provider, ev.Key}
			if seen[id] {
				return nil
			}
			if len(seen) == maxEncryptionKeys {
				return fmt.Errorf("more than %d encryption keys in use", maxEncryptionKeys)
			}
			seen[id] = true
			ev.Object = string(kv.Key)
			ev.Data = bytes.Clone(ev.Data)
			out = append(out, ev)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	return out, nil
}

// parseEncrypted splits `k8s:enc:<provider>:<version>:<key>:<data>`. The
// fields are bounded (64 bytes each) and printable, since they end up in
// conditions and messages.
func parseEncrypted(v []byte) (backupkeys.Sample, bool) {
	rest, ok := bytes.CutPrefix(v, encryptedPrefix)
	if !ok {
		return backupkeys.Sample{}, false
	}
	var fields [3]string
	for i := range fields {
		f, r, found := bytes.Cut(rest, []byte(":"))
		if !found || len(f) == 0 || len(f) > 64 || !printable(f) {
			return backupkeys.Sample{}, false
		}
		fields[i], rest = string(f), r
	}
	return backupkeys.Sample{Provider: fields[0] + ":" + fields[1], Key: fields[2], Data: rest}, true
}

func printable(b []byte) bool {
	for _, c := range b {
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

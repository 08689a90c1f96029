package encryptiontest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"filippo.io/age"
	"go.uber.org/zap"

	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/backupkeys"
	"github.com/kubefarm/kubefarm/internal/etcdsnapshot"
)

// checkSnapshotKeys takes a snapshot of the real etcd, whose Secrets the
// real API server encrypted (mid-rotation: some with key-1, some with
// key-2), and runs a restore's preflight on it: the key file sealed with
// the keys in force passes, and the same file with a key missing or with
// other bytes under a key's name is refused for that reason. wantKeys are
// the key names the snapshot's values must show.
func checkSnapshotKeys(t *testing.T, ctx context.Context, s *server, keys desired.EncryptionKeys, wantKeys []string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "snapshot.db")
	rc, err := s.etcd.Snapshot(ctx)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatalf("snapshot stream: %v", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := etcdsnapshot.Verify(path, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	digest := hex.EncodeToString(sum[:])
	values, err := etcdsnapshot.EncryptedValues(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range values {
		names = append(names, v.Key)
	}
	slices.Sort(names)
	if !slices.Equal(names, wantKeys) {
		t.Fatalf("the snapshot's values name keys %v, want %v", names, wantKeys)
	}

	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	sealed := func(k map[string][]byte) []byte {
		var buf bytes.Buffer
		if err := backupkeys.Seal(&buf, backupkeys.Keys{Tenant: "encryption/t", SnapshotSHA256: digest,
			TakenAt: time.Now().UTC(), Write: keys.Write, Keys: k}, id.Recipient()); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	if _, err := backupkeys.Check(bytes.NewReader(sealed(keys.Keys)), digest, values, id); err != nil {
		t.Errorf("the keys in force: %v", err)
	}
	old := slices.Min(slices.Collect(maps.Keys(keys.Keys)))
	without := maps.Clone(keys.Keys)
	delete(without, old)
	wrong := maps.Clone(keys.Keys)
	wrong[old] = randomKey(t)
	for name, tc := range map[string]struct {
		keys map[string][]byte
		want string
	}{
		"without " + old:        {without, backupkeys.ReasonSnapshotKeyUnknown},
		"other bytes as " + old: {wrong, backupkeys.ReasonSnapshotKeyWrong},
	} {
		_, err := backupkeys.Check(bytes.NewReader(sealed(tc.keys)), digest, values, id)
		var e *backupkeys.Error
		if !errors.As(err, &e) || e.Reason != tc.want {
			t.Errorf("%s: %v, want reason %s", name, err, tc.want)
		}
	}
}

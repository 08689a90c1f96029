package etcdsnapshot

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// The trailer check on its own, with synthetic streams. Verify as a whole
// (the trailer, then etcdutl's status of a real database) is tested on
// real snapshots from a real etcd in cmd/kubefarm-etcd.
func TestCheckTrailer(t *testing.T) {
	dir := t.TempDir()
	db := make([]byte, 8*4096)
	if _, err := rand.Read(db); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(db)
	whole := append(append([]byte{}, db...), sum[:]...)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	flipped := append([]byte{}, whole...)
	flipped[5000] ^= 0x01
	badTrailer := append([]byte{}, whole...)
	badTrailer[len(badTrailer)-1] ^= 0x80

	wholeSum := sha256.Sum256(whole)
	if size, got, err := checkTrailer(write("whole", whole)); err != nil || size != int64(len(whole)) || got != hex.EncodeToString(wholeSum[:]) {
		t.Errorf("a whole stream: size %d, sha256 %s, %v; want the file's sha256", size, got, err)
	}
	cases := map[string]struct {
		data []byte
		want string
	}{
		"truncated mid-page":             {whole[:len(whole)-1000], "not a whole snapshot stream"},
		"truncated at a sector boundary": {append(append([]byte{}, db[:4096]...), sum[:]...), "does not match"},
		"no trailer (copied db file)":    {db, "not a whole snapshot stream"},
		"a flipped bit":                  {flipped, "does not match"},
		"a flipped trailer bit":          {badTrailer, "does not match"},
		"empty":                          {nil, "not a whole snapshot stream"},
		"only a trailer":                 {sum[:], "not a whole snapshot stream"},
	}
	for name, tt := range cases {
		p := write(strings.ReplaceAll(name, " ", "-"), tt.data)
		_, _, err := checkTrailer(p)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v; want an error naming the file and saying %q", name, err, tt.want)
		}
	}
	if _, _, err := checkTrailer(filepath.Join(dir, "absent")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
	if _, _, err := checkTrailer(dir); err == nil {
		t.Error("a directory passed")
	}
	// Verify stops at the trailer: etcdutl never opens a broken stream.
	if _, err := Verify(filepath.Join(dir, "a-flipped-bit"), zap.NewNop()); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("Verify of a corrupted stream: %v", err)
	}
	// A whole stream of something that is not a database fails etcdutl's status.
	if _, err := Verify(filepath.Join(dir, "whole"), zap.NewNop()); err == nil || !strings.Contains(err.Error(), "snapshot status") {
		t.Errorf("Verify of random bytes with a valid trailer: %v", err)
	}
}

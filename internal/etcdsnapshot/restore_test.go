package etcdsnapshot

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// What Restore decides before it restores anything. The restore itself,
// from a real snapshot into a data directory a real etcd then starts on, is
// tested in cmd/kubefarm-etcd.
func TestRestoreRefusesOrSkips(t *testing.T) {
	opts := func(dir string) RestoreOptions {
		return RestoreOptions{
			Snapshot: filepath.Join(dir, "absent.db"), DataDir: filepath.Join(dir, "data"), Name: "m0",
			InitialCluster: "m0=https://127.0.0.1:2380", AdvertisePeerURLs: []string{"https://127.0.0.1:2380"}, Token: "t",
		}
	}

	t.Run("a member is there: skipped, even without a snapshot", func(t *testing.T) {
		dir := t.TempDir()
		o := opts(dir)
		wal := filepath.Join(o.DataDir, "member", "wal", "0.wal")
		if err := os.MkdirAll(filepath.Dir(wal), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(wal, []byte("data"), 0o600); err != nil {
			t.Fatal(err)
		}
		res, err := Restore(o, zap.NewNop())
		if err != nil || res.Action != ActionSkipped {
			t.Fatalf("Restore = %+v, %v; want skipped", res, err)
		}
		if b, _ := os.ReadFile(wal); string(b) != "data" {
			t.Error("the member's files changed")
		}
		assertNoTemp(t, o.DataDir)
	})

	t.Run("a missing snapshot is an error naming it", func(t *testing.T) {
		dir := t.TempDir()
		o := opts(dir)
		_, err := Restore(o, zap.NewNop())
		if err == nil || !strings.Contains(err.Error(), "verifying snapshot "+o.Snapshot) || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Restore = %v; want a not-exist error naming the step and %s", err, o.Snapshot)
		}
		if _, err := os.Stat(o.DataDir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the data directory was created: %v", err)
		}
		assertNoTemp(t, o.DataDir)
	})

	t.Run("files but no member: refused, untouched", func(t *testing.T) {
		dir := t.TempDir()
		o := opts(dir)
		stray := filepath.Join(o.DataDir, "stray")
		if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(stray, []byte("?"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Restore(o, zap.NewNop())
		if err == nil || !strings.Contains(err.Error(), "no member directory") {
			t.Fatalf("Restore = %v; want a refusal", err)
		}
		if _, err := os.Stat(stray); err != nil {
			t.Errorf("the stray file: %v", err)
		}
	})

	t.Run("bad flags: refused before anything", func(t *testing.T) {
		dir := t.TempDir()
		o := opts(dir)
		o.Name = ""
		_, err := Restore(o, zap.NewNop())
		if err == nil || !strings.Contains(err.Error(), "flags: ") {
			t.Fatalf("Restore = %v; want a flags error", err)
		}
	})
}

func assertNoTemp(t *testing.T, dataDir string) {
	t.Helper()
	if _, err := os.Stat(RestoreTempDir(dataDir)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s is left: %v", RestoreTempDir(dataDir), err)
	}
}

func TestRestoreTempDir(t *testing.T) {
	for in, want := range map[string]string{
		"/var/lib/etcd/data":  "/var/lib/etcd/.data.restore",
		"/var/lib/etcd/data/": "/var/lib/etcd/.data.restore",
		"data":                ".data.restore",
	} {
		if got := RestoreTempDir(in); got != want {
			t.Errorf("RestoreTempDir(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRenameNoReplace(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, []byte(filepath.Base(p)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := renameNoReplace(a, b); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("rename onto an existing file: %v, want ErrExist", err)
	}
	if got, _ := os.ReadFile(b); string(got) != "b" {
		t.Fatalf("the existing file was replaced: %q", got)
	}
	c := filepath.Join(dir, "c")
	if err := renameNoReplace(a, c); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(c); string(got) != "a" {
		t.Fatalf("renamed file holds %q", got)
	}
	// An empty directory is not replaced either: Restore removes it first.
	d := filepath.Join(dir, "d")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := renameNoReplace(c, d); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("rename onto an empty directory: %v, want ErrExist", err)
	}
}

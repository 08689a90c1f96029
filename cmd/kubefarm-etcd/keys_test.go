package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/minio/minio-go/v7"
	"golang.org/x/crypto/nacl/secretbox"

	"github.com/kubefarm/kubefarm/internal/backupkeys"
	"github.com/kubefarm/kubefarm/internal/etcdsnapshot"
	"github.com/kubefarm/kubefarm/internal/s3target"
	"github.com/kubefarm/kubefarm/internal/testing/etcdtest"
	"github.com/kubefarm/kubefarm/internal/testing/s3test"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// sealValue is what kube-apiserver's secretbox provider stores for plain
// under the key named name: the prefix, a random nonce, the box.
func sealValue(t *testing.T, name string, key []byte, plain string) string {
	t.Helper()
	var nonce [24]byte
	var k [32]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		t.Fatal(err)
	}
	copy(k[:], key)
	return "k8s:enc:secretbox:v1:" + name + ":" + string(secretbox.Seal(nonce[:], []byte(plain), &nonce, &k))
}

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// encryptionConfig is an EncryptionConfiguration as kubefarm renders it:
// one secretbox provider, the write key first, then identity.
func encryptionConfig(t *testing.T, keys ...struct {
	name string
	key  []byte
}) string {
	t.Helper()
	var ks []string
	for _, k := range keys {
		ks = append(ks, fmt.Sprintf(`{"name":%q,"secret":%q}`, k.name, base64.StdEncoding.EncodeToString(k.key)))
	}
	cfg := `{"kind":"EncryptionConfiguration","apiVersion":"apiserver.config.k8s.io/v1","resources":[{"resources":["secrets"],` +
		`"providers":[{"secretbox":{"keys":[` + strings.Join(ks, ",") + `]}},{"identity":{}}]}]}`
	path := filepath.Join(t.TempDir(), "encryption-configuration.json")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestSnapshotKeys runs the shipped binary against a real etcd holding
// Secrets encrypted as a tenant's API server writes them (two keys, as in
// the middle of a rotation): the snapshot is stored with its key file,
// which only the backup key's identity opens and whose keys decrypt the
// snapshot's values; retention deletes a snapshot with its key file and a
// key file left without its snapshot; keys that cannot read the snapshot
// fail the run and leave no snapshot; in a bucket the key file is uploaded
// beside the snapshot.
func TestSnapshotKeys(t *testing.T) {
	etcdBin := etcdtest.Binary(t)
	s3test.Binary(t)
	bin := testenv.BuildBinary(t, "kubefarm-etcd")
	p := etcdtest.NewPKI(t)
	src := newMember(t, "alpha-etcd-0")
	src.start(t, etcdBin, p)
	cli := newClient(t, src.clientURL, p)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	key1, key2 := newKey(t), newKey(t)
	for k, v := range map[string]string{
		"/registry/secrets/default/old":      sealValue(t, "key-1", key1, "written before the rotation"),
		"/registry/secrets/default/precious": sealValue(t, "key-2", key2, "written after it"),
		"/registry/configmaps/default/plain": "not encrypted",
	} {
		if _, err := cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	type named = struct {
		name string
		key  []byte
	}
	config := encryptionConfig(t, named{"key-2", key2}, named{"key-1", key1})
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	recipients := filepath.Join(t.TempDir(), "recipients")
	if err := os.WriteFile(recipients, []byte("# the backup key\n\n"+id.Recipient().String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const prefix = "alpha"
	secrets := []string{base64.StdEncoding.EncodeToString(key1), base64.StdEncoding.EncodeToString(key2), id.String()}
	args := func(dir string, extra ...string) []string {
		return append(append([]string{"snapshot", "--endpoints", src.clientURL, "--dial-timeout", "3s", "--timeout", "1m",
			"--dir", dir, "--prefix", prefix, "--termination-log", ""}, tlsFlags(p)...), extra...)
	}
	noSecrets := func(t *testing.T, r result) {
		t.Helper()
		outs := map[string][]byte{"stdout": r.stdout, "stderr": r.stderr}
		assertNoSecrets(t, outs, secrets...)
	}
	// opens checks the key file against the snapshot as a restore will.
	opens := func(t *testing.T, snapshot, keyFile string) {
		t.Helper()
		sealed, err := os.ReadFile(keyFile)
		if err != nil {
			t.Fatal(err)
		}
		samples, err := etcdsnapshot.EncryptedValues(snapshot)
		if err != nil || len(samples) != 2 {
			t.Fatalf("encrypted values of the snapshot: %d, %v; want 2", len(samples), err)
		}
		k, err := backupkeys.Check(bytes.NewReader(sealed), sha256File(t, snapshot), samples, id)
		if err != nil {
			t.Fatalf("the key file does not read its snapshot: %v", err)
		}
		if k.Write != "key-2" || !slices.Equal(k.Names(), []string{"key-1", "key-2"}) || k.Tenant != prefix {
			t.Errorf("keys: write %s, names %v, tenant %q; want key-2, [key-1 key-2], %q", k.Write, k.Names(), k.Tenant, prefix)
		}
		other, _ := age.GenerateX25519Identity()
		var e *backupkeys.Error
		if _, err := backupkeys.Open(bytes.NewReader(sealed), other); !errors.As(err, &e) || e.Reason != backupkeys.ReasonBackupKeyWrong {
			t.Errorf("opened with another identity: %v, want %s", err, backupkeys.ReasonBackupKeyWrong)
		}
	}

	t.Run("a snapshot with its key file; retention deletes pairs and orphans", func(t *testing.T) {
		dir := t.TempDir()
		old := func(day int) string { return fmt.Sprintf("%s-202001%02dT000000Z.db", prefix, day) }
		for _, name := range []string{old(1), etcdsnapshot.KeysName(old(1)), old(2), etcdsnapshot.KeysName(old(2))} {
			touch(t, filepath.Join(dir, name), 0)
		}
		orphan := etcdsnapshot.KeysName(old(3))
		touch(t, filepath.Join(dir, orphan), time.Hour)
		r := runTool(t, bin, nil, args(dir, "--retain", "2", "--keys-config", config, "--keys-recipients", recipients)...)
		if r.code != 0 {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		noSecrets(t, r)
		res := decodeResult(t, r.stdout)
		if res.Keys != etcdsnapshot.KeysName(res.File) {
			t.Fatalf("keys %q, want %q", res.Keys, etcdsnapshot.KeysName(res.File))
		}
		info, err := os.Stat(filepath.Join(dir, res.Keys))
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Fatalf("key file: %v (%v), want mode 0600", info, err)
		}
		opens(t, filepath.Join(dir, res.File), filepath.Join(dir, res.Keys))
		want := []string{old(2), etcdsnapshot.KeysName(old(2)), res.File, res.Keys}
		slices.Sort(want)
		if got := listDir(t, dir); !slices.Equal(got, want) {
			t.Errorf("--dir holds %q, want %q", got, want)
		}
	})

	t.Run("keys that do not read the snapshot fail the run and keep nothing", func(t *testing.T) {
		dir := t.TempDir()
		for name, cfg := range map[string]string{
			"a key missing":         encryptionConfig(t, named{"key-2", key2}),
			"a key of another name": encryptionConfig(t, named{"key-2", key2}, named{"key-1", newKey(t)}),
		} {
			r := runTool(t, bin, nil, args(dir, "--keys-config", cfg, "--keys-recipients", recipients)...)
			if r.code == 0 || !bytes.Contains(r.stdout, []byte("do not read the snapshot")) {
				t.Errorf("%s: exit %d, stdout %s; want a failure saying the keys do not read the snapshot", name, r.code, r.stdout)
			}
			noSecrets(t, r)
			if got := listDir(t, dir); len(got) != 0 {
				t.Errorf("%s: --dir holds %q, want nothing", name, got)
			}
		}
		pasted := filepath.Join(t.TempDir(), "recipients")
		if err := os.WriteFile(pasted, []byte("# the identity, pasted by mistake\n"+id.String()+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		r := runTool(t, bin, nil, args(dir, "--keys-config", config, "--keys-recipients", pasted)...)
		if r.code == 0 || !bytes.Contains(r.stdout, []byte("line 2 is not an age recipient")) {
			t.Errorf("an identity as recipient: exit %d, stdout %s; want a refusal naming line 2", r.code, r.stdout)
		}
		noSecrets(t, r)
		r = runTool(t, bin, nil, args(dir, "--keys-config", config)...)
		if r.code == 0 || !bytes.Contains(r.stdout, []byte("--keys-recipients")) {
			t.Errorf("--keys-config alone: exit %d, stdout %s; want a refusal naming --keys-recipients", r.code, r.stdout)
		}
	})

	t.Run("restore-check says what a restore would miss", func(t *testing.T) {
		dir := t.TempDir()
		r := runTool(t, bin, nil, args(dir, "--keys-config", config, "--keys-recipients", recipients)...)
		if r.code != 0 {
			t.Fatalf("snapshot: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		res := decodeResult(t, r.stdout)
		snap, keys := filepath.Join(dir, res.File), filepath.Join(dir, res.Keys)
		write := func(name string, b []byte) string {
			path := filepath.Join(t.TempDir(), name)
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}
		read := func(path string) []byte {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		idFile := write("identity", []byte("# the backup key\n"+id.String()+"\n"))
		other, _ := age.GenerateX25519Identity()
		otherFile := write("other", []byte(other.String()+"\n"))
		snapBytes := read(snap)
		cut := write(res.File, snapBytes[:len(snapBytes)/2])
		flipped := append([]byte(nil), snapBytes...)
		flipped[len(flipped)/3] ^= 0xff
		damagedSnap := write(res.File, flipped)
		sealed := read(keys)
		damagedKeys := write("damaged.keys.age", sealed[:len(sealed)-10])
		// A later snapshot's key file, sealed right, for other bytes.
		otherSnapDir := t.TempDir()
		if _, err := cli.Put(ctx, "/registry/configmaps/default/between", "written between the two snapshots"); err != nil {
			t.Fatal(err)
		}
		r = runTool(t, bin, nil, args(otherSnapDir, "--keys-config", config, "--keys-recipients", recipients)...)
		if r.code != 0 {
			t.Fatalf("second snapshot: exit %d\nstdout: %s", r.code, r.stdout)
		}
		res2 := decodeResult(t, r.stdout)
		for _, c := range []struct {
			name, snapshot, keys, identity, reason string
		}{
			{"a whole pair", snap, "", idFile, ""},
			{"the key file missing", snap, filepath.Join(t.TempDir(), "none.keys.age"), idFile, backupkeys.ReasonKeysMissing},
			{"another backup key", snap, "", otherFile, backupkeys.ReasonBackupKeyWrong},
			{"a cut key file", snap, damagedKeys, idFile, backupkeys.ReasonKeysDamaged},
			{"another snapshot's key file", snap, filepath.Join(otherSnapDir, res2.Keys), idFile, backupkeys.ReasonKeysForAnotherSnapshot},
			{"the snapshot missing", filepath.Join(t.TempDir(), res.File), keys, idFile, etcdsnapshot.ReasonSnapshotMissing},
			{"a snapshot cut in half", cut, keys, idFile, etcdsnapshot.ReasonSnapshotDamaged},
			{"a snapshot with a flipped byte", damagedSnap, keys, idFile, etcdsnapshot.ReasonSnapshotDamaged},
		} {
			// --reseal: a pair that passes hands its keys on sealed to
			// the identity alone; a refusal hands on nothing.
			a := []string{"restore-check", "--snapshot", c.snapshot, "--identity", c.identity, "--termination-log", "", "--reseal"}
			if c.keys != "" {
				a = append(a, "--keys", c.keys)
			}
			r := runTool(t, bin, nil, a...)
			noSecrets(t, r)
			var got etcdsnapshot.CheckResult
			if err := json.Unmarshal(r.stdout, &got); err != nil {
				t.Fatalf("%s: stdout %q: %v", c.name, r.stdout, err)
			}
			if got.Reason != c.reason || (r.code == 0) != (c.reason == "") {
				t.Errorf("%s: exit %d, reason %q (%s); want %q", c.name, r.code, got.Reason, got.Error, c.reason)
			}
			if c.reason == "" && (got.Write != "key-2" || !slices.Equal(got.KeyNames, []string{"key-1", "key-2"}) || got.Tenant != prefix) {
				t.Errorf("%s: %s; want write key-2 of [key-1 key-2] for %s", c.name, r.stdout, prefix)
			}
			checkResealed(t, c.name, got, c.reason == "", id, other)
		}

		// Keys supplied by hand, in the clear (--keys-config): the same
		// check on the snapshot, with no key file.
		type named = struct {
			name string
			key  []byte
		}
		for _, c := range []struct {
			name, config, reason string
		}{
			{"the keys in force", config, ""},
			{"a key missing", encryptionConfig(t, named{"key-2", key2}), backupkeys.ReasonSnapshotKeyUnknown},
			{"other bytes under a key's name", encryptionConfig(t, named{"key-2", key2}, named{"key-1", newKey(t)}), backupkeys.ReasonSnapshotKeyWrong},
			{"not a configuration", write("junk.json", []byte("{")), backupkeys.ReasonKeysDamaged},
		} {
			r := runTool(t, bin, nil, "restore-check", "--snapshot", snap, "--keys-config", c.config, "--termination-log", "")
			noSecrets(t, r)
			var got etcdsnapshot.CheckResult
			if err := json.Unmarshal(r.stdout, &got); err != nil {
				t.Fatalf("--keys-config, %s: stdout %q: %v", c.name, r.stdout, err)
			}
			if got.Reason != c.reason || (r.code == 0) != (c.reason == "") || got.Sealed != "" {
				t.Errorf("--keys-config, %s: exit %d, reason %q (%s); want %q", c.name, r.code, got.Reason, got.Error, c.reason)
			}
		}
		if r := runTool(t, bin, nil, "restore-check", "--snapshot", snap, "--keys-config", config, "--identity", idFile, "--termination-log", ""); r.code != exitUsage {
			t.Errorf("--keys-config with --identity: exit %d, want %d", r.code, exitUsage)
		}
	})

	t.Run("in a bucket the key file is uploaded beside the snapshot", func(t *testing.T) {
		srv := s3test.Start(t, s3test.Options{})
		srv.MakeBucket(t, "backups")
		creds := []string{s3target.EnvAccessKeyID + "=" + srv.AccessKey, s3target.EnvSecretAccessKey + "=" + srv.SecretKey}
		r := runTool(t, bin, creds, args(t.TempDir(), "--keys-config", config, "--keys-recipients", recipients,
			"--s3-bucket", "backups", "--s3-endpoint", srv.Endpoint, "--s3-prefix", "t/", "--s3-region", "us-east-1")...)
		if r.code != 0 {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		noSecrets(t, r)
		res := decodeResult(t, r.stdout)
		if res.KeysObject != "t/"+etcdsnapshot.KeysName(res.File) {
			t.Fatalf("keysObject %q, want %q", res.KeysObject, "t/"+etcdsnapshot.KeysName(res.File))
		}
		if keys := srv.Keys(t, "backups"); !slices.Equal(keys, []string{res.Object, res.KeysObject}) {
			t.Errorf("the bucket holds %q, want the snapshot and its key file", keys)
		}
		got := t.TempDir()
		for _, o := range []string{res.Object, res.KeysObject} {
			if err := srv.Client.FGetObject(ctx, "backups", o, filepath.Join(got, filepath.Base(o)), minio.GetObjectOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		opens(t, filepath.Join(got, res.File), filepath.Join(got, etcdsnapshot.KeysName(res.File)))

		// A restore straight from the bucket: the check downloads the
		// pair, the restore the snapshot (and removes its download).
		s3Flags := []string{"--s3-bucket", "backups", "--s3-endpoint", srv.Endpoint, "--s3-prefix", "t/", "--s3-region", "us-east-1"}
		idFile := filepath.Join(t.TempDir(), "identity")
		if err := os.WriteFile(idFile, []byte(id.String()+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		other, _ := age.GenerateX25519Identity()
		for _, c := range []struct{ name, snapshot, reason string }{
			{"the pair from the bucket", res.File, ""},
			{"a snapshot the bucket does not hold", prefix + "-20200101T000000Z.db", etcdsnapshot.ReasonSnapshotMissing},
		} {
			check := append([]string{"restore-check", "--snapshot", c.snapshot, "--identity", idFile, "--reseal",
				"--fetch-dir", t.TempDir(), "--termination-log", ""}, s3Flags...)
			r := runTool(t, bin, creds, check...)
			noSecrets(t, r)
			var cr etcdsnapshot.CheckResult
			if err := json.Unmarshal(r.stdout, &cr); err != nil {
				t.Fatalf("%s: stdout %q: %v", c.name, r.stdout, err)
			}
			if cr.Reason != c.reason || (r.code == 0) != (c.reason == "") {
				t.Errorf("%s: exit %d, reason %q (%s); want %q\n%s", c.name, r.code, cr.Reason, cr.Error, c.reason, r.stderr)
			}
			checkResealed(t, c.name, cr, c.reason == "", id, other)
		}
		r = runTool(t, bin, nil, append([]string{"restore-check", "--snapshot", res.File, "--identity", idFile, "--termination-log", ""}, s3Flags...)...)
		if r.code != exitUsage || !bytes.Contains(r.stdout, []byte(s3target.EnvAccessKeyID)) {
			t.Errorf("restore-check from a bucket without credentials: exit %d, %s", r.code, r.stdout)
		}

		dst := newMember(t, "alpha-etcd-1")
		fetch := t.TempDir()
		restore := append([]string{"restore", "--snapshot", res.File, "--data-dir", dst.dataDir, "--name", dst.name,
			"--initial-cluster", dst.initialCluster(), "--initial-advertise-peer-urls", dst.peerURL,
			"--initial-cluster-token", dst.token, "--fetch-dir", fetch, "--termination-log", ""}, s3Flags...)
		r = runTool(t, bin, creds, restore...)
		noSecrets(t, r)
		var rr etcdsnapshot.RestoreResult
		if err := json.Unmarshal(r.stdout, &rr); err != nil || r.code != 0 || rr.Action != etcdsnapshot.ActionRestored || rr.Revision != res.Revision {
			t.Fatalf("restore from the bucket: exit %d, %s (%v)\n%s", r.code, r.stdout, err, r.stderr)
		}
		if _, err := os.Stat(filepath.Join(dst.dataDir, "member")); err != nil {
			t.Errorf("no member in the restored data directory: %v", err)
		}
		if left, _ := os.ReadDir(fetch); len(left) != 0 {
			t.Errorf("the download is left in --fetch-dir: %v", left)
		}
	})
}

// checkResealed checks restore-check --reseal's "sealed": when the pair
// passed, keys that open with the backup key's identity (and not with
// another) and are the key file's; otherwise nothing.
func checkResealed(t *testing.T, name string, got etcdsnapshot.CheckResult, passed bool, id, other *age.X25519Identity) {
	t.Helper()
	if !passed {
		if got.Sealed != "" {
			t.Errorf("%s: a refused pair handed on sealed keys", name)
		}
		return
	}
	sealed, err := base64.StdEncoding.DecodeString(got.Sealed)
	if err != nil || len(sealed) == 0 {
		t.Fatalf("%s: sealed %q is not base64 of a file: %v", name, got.Sealed, err)
	}
	k, err := backupkeys.Open(bytes.NewReader(sealed), id)
	if err != nil {
		t.Fatalf("%s: the resealed keys do not open with the backup key: %v", name, err)
	}
	if k.Write != got.Write || !slices.Equal(k.Names(), got.KeyNames) || k.Tenant != got.Tenant {
		t.Errorf("%s: resealed keys hold write %s of %v for %s, the result says %s of %v for %s",
			name, k.Write, k.Names(), k.Tenant, got.Write, got.KeyNames, got.Tenant)
	}
	if _, err := backupkeys.Open(bytes.NewReader(sealed), other); err == nil {
		t.Errorf("%s: the resealed keys open with an identity that is not the backup key's", name)
	}
}

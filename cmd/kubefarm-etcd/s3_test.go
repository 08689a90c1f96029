package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"go.uber.org/zap"

	"github.com/kubefarm/kubefarm/internal/etcdsnapshot"
	"github.com/kubefarm/kubefarm/internal/s3target"
	"github.com/kubefarm/kubefarm/internal/testing/etcdtest"
	"github.com/kubefarm/kubefarm/internal/testing/s3test"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// assertNoSecrets fails if any of outs holds one of the secrets.
func assertNoSecrets(t *testing.T, outs map[string][]byte, secrets ...string) {
	t.Helper()
	for what, out := range outs {
		for _, s := range secrets {
			if s != "" && bytes.Contains(out, []byte(s)) {
				t.Errorf("%s holds a credential (%d bytes of it)", what, len(s))
			}
		}
	}
}

// decodeResult reads stdout as exactly one SnapshotResult line.
func decodeResult(t *testing.T, stdout []byte) etcdsnapshot.SnapshotResult {
	t.Helper()
	if bytes.Count(stdout, []byte("\n")) != 1 {
		t.Fatalf("stdout is not one line: %q", stdout)
	}
	var res etcdsnapshot.SnapshotResult
	dec := json.NewDecoder(bytes.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("stdout %q: %v", stdout, err)
	}
	return res
}

func putObject(t *testing.T, cli *minio.Client, bucket, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body := []byte("not ours to delete\n")
	if _, err := cli.PutObject(ctx, bucket, key, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
		t.Fatalf("seeding %s: %v", key, err)
	}
}

// TestSnapshotS3 runs the shipped binary against a real etcd with TLS
// client authentication and a real S3 server (versitygw): the snapshot
// lands in the bucket under --s3-prefix with the file's size and verifies
// when downloaded; retention in the bucket leaves --retain snapshots of the
// prefix and never touches another object; a wrong secret fails the
// upload step and no output holds a credential; missing credentials fail
// before anything is streamed; every object PUT carries Content-MD5 and a
// body corrupted on the way is refused by the server (over http its
// signed payload hash catches it first) with the bucket unchanged; a
// snapshot above one 16 MiB part goes up as a multipart upload and
// verifies; over TLS the endpoint is trusted through --s3-ca-file and
// refused without it.
func TestSnapshotS3(t *testing.T) {
	etcdBin := etcdtest.Binary(t)
	s3test.Binary(t) // a missing server fails here, before anything is started
	bin := testenv.BuildBinary(t, "kubefarm-etcd")
	p := etcdtest.NewPKI(t)

	src := newMember(t, "alpha-etcd-0")
	src.start(t, etcdBin, p)
	cli := newClient(t, src.clientURL, p)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var revision int64
	for i := range 50 {
		resp, err := cli.Put(ctx, fmt.Sprintf("/registry/secrets/ns/s-%03d", i), strings.Repeat("v", 100+i))
		if err != nil {
			t.Fatal(err)
		}
		revision = resp.Header.Revision
	}

	const (
		prefix   = "tenants-alpha"
		bucket   = "etcd-backups"
		s3Prefix = "farm/tenants/"
	)
	srv := s3test.Start(t, s3test.Options{})
	srv.MakeBucket(t, bucket)
	creds := []string{s3target.EnvAccessKeyID + "=" + srv.AccessKey, s3target.EnvSecretAccessKey + "=" + srv.SecretKey}

	old := func(day int) string { return fmt.Sprintf("%s-202001%02dT000000Z.db", prefix, day) }
	for _, name := range []string{old(1), old(2), old(3)} {
		putObject(t, srv.Client, bucket, s3Prefix+name)
	}
	foreign := []string{
		s3Prefix + "tenants-alpha-b-20200101T000000Z.db", // tenant "b" of namespace tenants-alpha
		s3Prefix + "tenants-beta-20200101T000000Z.db",
		s3Prefix + old(1) + ".bak",
		s3Prefix + "." + old(4) + ".part", // a temporary name means nothing in a bucket
		s3Prefix + old(5) + "/nested",     // a "folder" named like a snapshot
		s3Prefix + "notes.txt",
		"farm/" + old(1),               // the same name under another prefix
		old(1),                         // and at the top of the bucket
		"farm/tenants-other/" + old(1), // a prefix that starts like this one
	}
	for _, key := range foreign {
		putObject(t, srv.Client, bucket, key)
	}

	snapArgs := func(dir, tlog string, extra ...string) []string {
		return append(append([]string{"snapshot", "--endpoints", src.clientURL, "--dial-timeout", "3s", "--timeout", "1m",
			"--dir", dir, "--prefix", prefix, "--termination-log", tlog}, tlsFlags(p)...), extra...)
	}
	newTlog := func() string {
		tlog := filepath.Join(t.TempDir(), "termination-log")
		touch(t, tlog, 0)
		return tlog
	}
	outputs := func(r result, tlog string) map[string][]byte {
		tl, _ := os.ReadFile(tlog)
		return map[string][]byte{"stdout": r.stdout, "stderr": r.stderr, "the termination log": tl}
	}

	t.Run("upload and retention", func(t *testing.T) {
		dir, tlog := t.TempDir(), newTlog()
		r := runTool(t, bin, creds, snapArgs(dir, tlog, "--retain", "2",
			"--s3-bucket", bucket, "--s3-endpoint", srv.Endpoint, "--s3-prefix", s3Prefix, "--s3-region", "us-east-1")...)
		if r.code != 0 {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		assertNoSecrets(t, outputs(r, tlog), srv.SecretKey, srv.AccessKey)
		assertNoKeys(t, p, "stdout", r.stdout)
		assertNoKeys(t, p, "stderr", r.stderr)
		t.Logf("result: %s", r.stdout)
		res := decodeResult(t, r.stdout)
		if tl, _ := os.ReadFile(tlog); !bytes.Equal(tl, r.stdout) {
			t.Errorf("termination log %q, want stdout's line %q", tl, r.stdout)
		}
		if _, ok := etcdsnapshot.ParseSnapshotName(prefix, res.File); !ok {
			t.Fatalf("file %q is not <prefix>-<time>.db", res.File)
		}
		if res.Bucket != bucket || res.Object != s3Prefix+res.File {
			t.Errorf("bucket %q, object %q; want %q and %q", res.Bucket, res.Object, bucket, s3Prefix+res.File)
		}
		// The local save is as without a bucket.
		info, err := os.Stat(filepath.Join(dir, res.File))
		if err != nil || info.Size() != res.Size {
			t.Fatalf("--dir: %v (%v), want the snapshot of %d bytes", info, err, res.Size)
		}
		if res.Revision != revision {
			t.Errorf("revision %d, etcd was at %d", res.Revision, revision)
		}

		st, err := srv.Client.StatObject(ctx, bucket, res.Object, minio.StatObjectOptions{})
		if err != nil {
			t.Fatalf("the uploaded object: %v", err)
		}
		if st.Size != res.Size || st.ContentType != "application/octet-stream" {
			t.Errorf("object of %d bytes, %q; want %d, application/octet-stream", st.Size, st.ContentType, res.Size)
		}
		got := filepath.Join(t.TempDir(), "downloaded.db")
		if err := srv.Client.FGetObject(ctx, bucket, res.Object, got, minio.GetObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		vs, err := etcdsnapshot.Verify(got, zap.NewNop())
		if err != nil {
			t.Fatalf("the downloaded object does not verify: %v", err)
		}
		if vs.Revision != revision || vs.TotalKey != 50 {
			t.Errorf("downloaded snapshot: %d keys at revision %d, want 50 at %d", vs.TotalKey, vs.Revision, revision)
		}

		// Retention in the bucket: the two oldest of ours, oldest first;
		// every other object stays.
		if res.Kept != 2 || !slices.Equal(res.Deleted, []string{old(1), old(2)}) {
			t.Errorf("kept %d, deleted %q; want 2 and %q", res.Kept, res.Deleted, []string{old(1), old(2)})
		}
		want := append([]string{res.Object, s3Prefix + old(3)}, foreign...)
		slices.Sort(want)
		if keys := srv.Keys(t, bucket); !slices.Equal(keys, want) {
			t.Errorf("the bucket holds\n%q\nwant\n%q", keys, want)
		}
	})

	t.Run("wrong secret", func(t *testing.T) {
		before := srv.Keys(t, bucket)
		wrong := "wrong-" + srv.SecretKey[:16]
		dir, tlog := t.TempDir(), newTlog()
		env := []string{s3target.EnvAccessKeyID + "=" + srv.AccessKey, s3target.EnvSecretAccessKey + "=" + wrong}
		r := runTool(t, bin, env, snapArgs(dir, tlog, "--s3-bucket", bucket, "--s3-endpoint", srv.Endpoint, "--s3-prefix", s3Prefix)...)
		if r.code != exitFailed {
			t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, exitFailed, r.stdout, r.stderr)
		}
		t.Logf("result: %s", r.stdout)
		assertNoSecrets(t, outputs(r, tlog), wrong, srv.SecretKey, srv.AccessKey)
		var e struct{ Error string }
		if err := json.Unmarshal(r.stdout, &e); err != nil || !strings.Contains(e.Error, "uploading to s3://"+bucket+"/"+s3Prefix+prefix+"-") ||
			!strings.Contains(strings.ToLower(e.Error), "signature") {
			t.Errorf("result %s (%v), want the server's signature error at the upload step", r.stdout, err)
		}
		if tl, _ := os.ReadFile(tlog); !bytes.Equal(tl, r.stdout) {
			t.Errorf("termination log %q, want stdout's line %q", tl, r.stdout)
		}

		// A session token the server does not know fails the same step,
		// and is not printed either.
		const token = "session-token-that-must-not-print"
		dir, tlog = t.TempDir(), newTlog()
		r = runTool(t, bin, append(creds, s3target.EnvSessionToken+"="+token),
			snapArgs(dir, tlog, "--s3-bucket", bucket, "--s3-endpoint", srv.Endpoint, "--s3-prefix", s3Prefix)...)
		t.Logf("result with a session token: %s", r.stdout)
		if r.code != exitFailed || !bytes.Contains(r.stdout, []byte("uploading to s3://")) {
			t.Errorf("exit %d, %s; want %d and an error of the upload step", r.code, r.stdout, exitFailed)
		}
		assertNoSecrets(t, outputs(r, tlog), token, srv.SecretKey, srv.AccessKey)
		if tl, _ := os.ReadFile(tlog); !bytes.Equal(tl, r.stdout) {
			t.Errorf("termination log %q, want stdout's line %q", tl, r.stdout)
		}
		if after := srv.Keys(t, bucket); !slices.Equal(after, before) {
			t.Errorf("a failed upload changed the bucket: %q, was %q", after, before)
		}
	})

	t.Run("no credentials", func(t *testing.T) {
		dir, tlog := t.TempDir(), newTlog()
		r := runTool(t, bin, []string{s3target.EnvSecretAccessKey + "=" + srv.SecretKey},
			snapArgs(dir, tlog, "--s3-bucket", bucket, "--s3-endpoint", srv.Endpoint)...)
		if r.code != exitFailed || !bytes.Contains(r.stdout, []byte("$AWS_ACCESS_KEY_ID is required")) {
			t.Errorf("exit %d, %s; want %d and an error naming $AWS_ACCESS_KEY_ID", r.code, r.stdout, exitFailed)
		}
		assertNoSecrets(t, outputs(r, tlog), srv.SecretKey)
		if got := listDir(t, dir); len(got) != 0 {
			t.Errorf("flags are checked before the snapshot, but --dir holds %q", got)
		}
	})

	t.Run("Content-MD5 and a corrupted body", func(t *testing.T) {
		target, err := url.Parse(srv.Endpoint)
		if err != nil {
			t.Fatal(err)
		}
		// A reverse proxy in front of the real server: it records whether
		// each object PUT carries Content-MD5 and, when asked, flips a
		// byte of the body on the way.
		var mu sync.Mutex
		var puts, withMD5 int
		corrupt := false
		rp := httputil.NewSingleHostReverseProxy(target)
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.Method == http.MethodPut && strings.Count(strings.Trim(req.URL.Path, "/"), "/") > 0 {
				mu.Lock()
				puts++
				if req.Header.Get("Content-Md5") != "" {
					withMD5++
				}
				if corrupt {
					req.Body = &flipByte{r: req.Body, at: 100}
				}
				mu.Unlock()
			}
			rp.ServeHTTP(w, req)
		}))
		defer proxy.Close()
		const cbucket = "etcd-backups-md5"
		srv.MakeBucket(t, cbucket)

		dir, tlog := t.TempDir(), newTlog()
		r := runTool(t, bin, creds, snapArgs(dir, tlog, "--s3-bucket", cbucket, "--s3-endpoint", proxy.URL)...)
		if r.code != 0 {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		mu.Lock()
		if puts == 0 || withMD5 != puts {
			t.Errorf("%d of %d object PUTs carried Content-MD5, want all", withMD5, puts)
		}
		corrupt = true
		mu.Unlock()
		before := srv.Keys(t, cbucket)

		dir, tlog = t.TempDir(), newTlog()
		r = runTool(t, bin, creds, snapArgs(dir, tlog, "--s3-bucket", cbucket, "--s3-endpoint", proxy.URL)...)
		t.Logf("result with a corrupted body: %s", r.stdout)
		if r.code != exitFailed || !bytes.Contains(r.stdout, []byte("uploading to s3://"+cbucket+"/")) {
			t.Errorf("exit %d, %s; want %d and an error of the upload step", r.code, r.stdout, exitFailed)
		}
		assertNoSecrets(t, outputs(r, tlog), srv.SecretKey, srv.AccessKey)
		// The second run may have the first one's name (the same second);
		// either way the bucket holds exactly what it held.
		if after := srv.Keys(t, cbucket); !slices.Equal(after, before) {
			t.Errorf("a refused upload changed the bucket: %q, was %q", after, before)
		}
	})

	// Last, since it writes to etcd: a snapshot above minio-go's 16 MiB
	// part size goes up as a multipart upload, Content-MD5 on each part.
	t.Run("multipart", func(t *testing.T) {
		const mbucket = "etcd-backups-large"
		srv.MakeBucket(t, mbucket)
		value := strings.Repeat("x", 256<<10)
		for i := range 80 { // 20 MiB of values
			if _, err := cli.Put(ctx, fmt.Sprintf("/registry/configmaps/ns/large-%03d", i), value); err != nil {
				t.Fatal(err)
			}
		}
		dir, tlog := t.TempDir(), newTlog()
		r := runTool(t, bin, creds, snapArgs(dir, tlog, "--s3-bucket", mbucket, "--s3-endpoint", srv.Endpoint)...)
		if r.code != 0 {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		res := decodeResult(t, r.stdout)
		if res.Size <= 16<<20 {
			t.Fatalf("the snapshot has %d bytes, not more than one 16 MiB part", res.Size)
		}
		// A multipart upload's ETag is <md5 of the parts' md5s>-<parts>.
		st, err := srv.Client.StatObject(ctx, mbucket, res.Object, minio.StatObjectOptions{})
		if err != nil || st.Size != res.Size || !strings.Contains(st.ETag, "-") {
			t.Errorf("object: %d bytes, ETag %q (%v); want %d bytes of a multipart upload", st.Size, st.ETag, err, res.Size)
		}
		got := filepath.Join(t.TempDir(), "downloaded.db")
		if err := srv.Client.FGetObject(ctx, mbucket, res.Object, got, minio.GetObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		vs, err := etcdsnapshot.Verify(got, zap.NewNop())
		if err != nil {
			t.Fatalf("the downloaded object does not verify: %v", err)
		}
		if vs.Size != res.Size || vs.Revision != res.Revision {
			t.Errorf("downloaded: %d bytes at revision %d; the result says %d at %d", vs.Size, vs.Revision, res.Size, res.Revision)
		}
	})

	t.Run("TLS", func(t *testing.T) {
		tsrv := s3test.Start(t, s3test.Options{CertFile: p.ServerCert, KeyFile: p.ServerKey, CAFile: p.CA})
		tsrv.MakeBucket(t, bucket)
		tcreds := []string{s3target.EnvAccessKeyID + "=" + tsrv.AccessKey, s3target.EnvSecretAccessKey + "=" + tsrv.SecretKey}

		dir, tlog := t.TempDir(), newTlog()
		r := runTool(t, bin, tcreds, snapArgs(dir, tlog, "--s3-bucket", bucket, "--s3-endpoint", tsrv.Endpoint, "--s3-ca-file", p.CA)...)
		if r.code != 0 {
			t.Fatalf("with --s3-ca-file: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		assertNoSecrets(t, outputs(r, tlog), tsrv.SecretKey, tsrv.AccessKey)
		res := decodeResult(t, r.stdout)
		if res.Object != res.File || res.Kept != 1 || len(res.Deleted) != 0 {
			t.Errorf("result %+v, want the object named as the file, alone in the bucket", res)
		}
		if keys := tsrv.Keys(t, bucket); !slices.Equal(keys, []string{res.File}) {
			t.Errorf("the bucket holds %q, want %q", keys, res.File)
		}

		// Without --s3-ca-file the system roots do not know the test CA.
		dir, tlog = t.TempDir(), newTlog()
		r = runTool(t, bin, tcreds, snapArgs(dir, tlog, "--s3-bucket", bucket, "--s3-endpoint", tsrv.Endpoint)...)
		if r.code != exitFailed {
			t.Fatalf("without --s3-ca-file: exit %d, want %d\nstdout: %s", r.code, exitFailed, r.stdout)
		}
		t.Logf("result: %s", r.stdout)
		var e struct{ Error string }
		if err := json.Unmarshal(r.stdout, &e); err != nil || !strings.Contains(e.Error, "uploading to s3://"+bucket+"/") ||
			!strings.Contains(e.Error, "certificate") {
			t.Errorf("result %s (%v), want a certificate error of the upload step", r.stdout, err)
		}
		assertNoSecrets(t, outputs(r, tlog), tsrv.SecretKey, tsrv.AccessKey)
		assertNoKeys(t, p, "stdout", r.stdout)
		assertNoKeys(t, p, "stderr", r.stderr)
	})
}

// flipByte reads r with the byte at offset at inverted.
type flipByte struct {
	r   io.ReadCloser
	at  int64
	off int64
}

func (f *flipByte) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if i := f.at - f.off; i >= 0 && i < int64(n) {
		p[i] ^= 0xff
	}
	f.off += int64(n)
	return n, err
}

func (f *flipByte) Close() error { return f.r.Close() }

// Package s3test runs a real S3 server for tests: versitygw, an
// S3-compatible gateway with a POSIX backend, built from its Go module at
// the version pinned in hack/tools/versitygw (`make envtest-tools`). It is
// imported by tests only.
package s3test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/kubefarm/kubefarm/internal/testing/etcdtest"
	"github.com/kubefarm/kubefarm/internal/testing/local"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// Binary is the pinned versitygw that `make envtest-tools` builds: missing
// is a failure that says how to build it, never a skip.
func Binary(t testing.TB) string {
	t.Helper()
	return testenv.PinnedBinary(t, "versitygw")
}

// Options of Start. CertFile and KeyFile turn TLS on; CAFile is the CA
// that signed CertFile, which the test's client trusts.
type Options struct {
	CertFile, KeyFile, CAFile string
	// Host is the address to listen on; empty is 127.0.0.1. The e2e
	// tests give the node's address, which pods reach.
	Host string
}

// Server is one running versitygw.
type Server struct {
	// Endpoint is http://<host>:<port> or, with TLS, https://...
	Endpoint string
	// AccessKey and SecretKey are the root user's credentials, random
	// per server.
	AccessKey, SecretKey string
	// Client is a client of the server with the root user's credentials.
	Client *minio.Client
	// Log is the server's output file.
	Log string
}

// Start runs versitygw on a free port (of loopback unless opts.Host) over a new temporary
// directory (objects under root, metadata in a sidecar directory, so no
// extended attributes are needed), waits with a deadline until it answers
// a ListBuckets call, and stops it when t ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	root, meta := filepath.Join(dir, "root"), filepath.Join(dir, "meta")
	for _, d := range []string{root, meta} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s := &Server{AccessKey: "test" + local.RandomHex(t, 8), SecretKey: local.RandomHex(t, 20), Log: filepath.Join(dir, "versitygw.log")}
	host := opts.Host
	if host == "" {
		host = "127.0.0.1"
	}
	addr := net.JoinHostPort(host, strconv.Itoa(etcdtest.FreePort(t)))
	args := []string{"--port", addr, "--access", s.AccessKey, "--secret", s.SecretKey, "--quiet"}
	scheme := "http"
	if opts.CertFile != "" {
		args = append(args, "--cert", opts.CertFile, "--key", opts.KeyFile)
		scheme = "https"
	}
	args = append(args, "posix", "--sidecar", meta, root)
	s.Endpoint = scheme + "://" + addr

	logf, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Only what the server needs from the environment: none of the
	// test's own settings, such as $VGW_* or $ROOT_*, may change it.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + dir}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-exited:
			return
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	s.Client = s.NewClient(t, s.AccessKey, s.SecretKey, opts.CAFile)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := s.Client.ListBuckets(ctx)
		cancel()
		if err == nil {
			return s
		}
		select {
		case werr := <-exited:
			exited <- werr
			log, _ := os.ReadFile(s.Log)
			t.Fatalf("versitygw exited before it was ready: %v\n%s", werr, log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(s.Log)
			t.Fatalf("versitygw not ready after 60s: %v\n%s", err, log)
		}
		time.Sleep(100 * time.Millisecond) // poll interval, not synchronisation
	}
}

// NewClient is a client of s with the given credentials, trusting caFile
// (a PEM file) when s serves TLS.
func (s *Server) NewClient(t testing.TB, access, secret, caFile string) *minio.Client {
	t.Helper()
	tr, err := minio.DefaultTransport(caFile != "")
	if err != nil {
		t.Fatal(err)
	}
	tr.Proxy = nil
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			t.Fatalf("no certificate in %s", caFile)
		}
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	}
	host, secure := strings.CutPrefix(s.Endpoint, "https://")
	if !secure {
		host = strings.TrimPrefix(s.Endpoint, "http://")
	}
	cli, err := minio.New(host, &minio.Options{
		Creds: credentials.NewStaticV4(access, secret, ""), Secure: secure, Transport: http.RoundTripper(tr),
		BucketLookup: minio.BucketLookupPath, MaxRetries: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// MakeBucket creates a bucket.
func (s *Server) MakeBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Client.MakeBucket(ctx, name, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("creating bucket %s: %v", name, err)
	}
}

// Keys lists every object key in bucket, in S3's (lexical) order.
func (s *Server) Keys(t testing.TB, bucket string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var keys []string
	for obj := range s.Client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			t.Fatalf("listing %s: %v", bucket, obj.Err)
		}
		keys = append(keys, obj.Key)
	}
	return keys
}

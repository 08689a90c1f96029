package etcdsnapshot

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TLSConfig is the client's TLS: TLS 1.2 or later, etcd's CA, the client
// certificate. Errors name the flag and file, never their contents.
func TLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	pool, err := caPool("--cacert", caFile)
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		// LoadX509KeyPair's messages name what failed to parse, not the bytes.
		return nil, fmt.Errorf("--cert %s / --key %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, Certificates: []tls.Certificate{cert}}, nil
}

// caPool reads the PEM bundle file that flag names; errors name the flag
// and the file, never their contents.
func caPool(flag, file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s: no PEM certificate in it", flag, file)
	}
	return pool, nil
}

// StepError is a failed run's error: the endpoint (if one was picked) and
// the step, so the message says where to look.
type StepError struct {
	Endpoint string
	Step     string
	Err      error
}

func (e *StepError) Error() string {
	if e.Endpoint == "" {
		return e.Step + ": " + e.Err.Error()
	}
	return "endpoint " + e.Endpoint + ": " + e.Step + ": " + e.Err.Error()
}

func (e *StepError) Unwrap() error { return e.Err }

// Save takes one snapshot (see the package comment and docs/etcd.md):
// picks the first endpoint that answers a Status call, streams its
// snapshot into a hidden temporary file in o.Dir, fsyncs it, verifies it,
// renames it to SnapshotName and fsyncs the directory, then applies
// retention. On failure the temporary file is removed and nothing else has
// changed, except that a retention failure leaves the new snapshot in place
// (its name is in the error).
func Save(ctx context.Context, o SnapshotOptions, lg *zap.Logger) (SnapshotResult, error) {
	tlsCfg, s3cli, err := prepareSave(o)
	if err != nil {
		return SnapshotResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()

	cli, ep, err := pickEndpoint(ctx, o, tlsCfg, lg)
	if err != nil {
		return SnapshotResult{}, err
	}
	defer func() { _ = cli.Close() }()

	// One time for the temporary and the final name: the moment the
	// snapshot was asked for, closest to the data it holds.
	now := time.Now().UTC().Truncate(time.Second)
	name := SnapshotName(o.Prefix, now)
	final := filepath.Join(o.Dir, name)
	st, err := saveSnapshot(ctx, o, cli, ep, now, lg)
	if err != nil {
		return SnapshotResult{}, err
	}
	res := SnapshotResult{File: name, Size: st.Size, Revision: st.Revision, Time: now.Format(time.RFC3339)}
	if o.KeysEnabled() {
		// A snapshot is kept only with its keys: without them its Secrets
		// cannot be read back, and retention would count it as a backup.
		if res.Keys, err = saveKeys(o, name, st.SHA256, now, lg); err != nil {
			_ = os.Remove(final)
			_ = syncDir(o.Dir)
			return SnapshotResult{}, err
		}
	}
	dirKept, dirDeleted, rerr := applyRetention(o, name, lg)
	if !o.S3.Enabled() {
		res.Kept, res.Deleted = dirKept, dirDeleted
		if rerr != nil {
			return res, &StepError{Step: "retention (snapshot " + name + " was saved)", Err: rerr}
		}
		return res, nil
	}
	// With a bucket the result describes the bucket; --dir's retention
	// is logged, and its failure reported only after the upload, which
	// matters more.
	if rerr != nil {
		lg.Error("retention in --dir failed; uploading anyway", zap.Error(rerr))
	} else {
		lg.Info("retention in --dir", zap.Int("kept", dirKept), zap.Strings("deleted", dirDeleted))
	}
	if err := uploadSnapshot(ctx, o, s3cli, final, name, &res, lg); err != nil {
		return res, err
	}
	if rerr != nil {
		return res, &StepError{Step: "retention in --dir (snapshot " + name + " was saved and uploaded)", Err: rerr}
	}
	return res, nil
}

// prepareSave checks everything a run needs before it asks a member for a
// snapshot: the options, the TLS files, the S3 client (nil without a
// bucket) and --dir.
func prepareSave(o SnapshotOptions) (*tls.Config, *minio.Client, error) {
	if err := o.Validate(); err != nil {
		return nil, nil, &StepError{Step: "flags", Err: err}
	}
	tlsCfg, err := TLSConfig(o.CACert, o.Cert, o.Key)
	if err != nil {
		return nil, nil, &StepError{Step: "tls", Err: err}
	}
	var s3cli *minio.Client
	if o.S3.Enabled() {
		// Before the stream, so that a wrong --s3-ca-file costs no snapshot.
		if s3cli, err = NewS3Client(o.S3); err != nil {
			return nil, nil, &StepError{Step: "s3 client", Err: err}
		}
	}
	if o.KeysEnabled() {
		// The same: a wrong recipients file or configuration costs no
		// stream. SealKeys reads both again after it (the configuration
		// may change meanwhile, in a rotation).
		if _, err := ReadRecipients(o.KeysRecipients); err != nil {
			return nil, nil, &StepError{Step: "reading the backup key", Err: err}
		}
		if _, err := readKeysConfig(o.KeysConfig); err != nil {
			return nil, nil, &StepError{Step: "reading the encryption keys", Err: err}
		}
	}
	// Before any member is asked for a snapshot: a missing volume is the
	// likelier mistake, and the stream would be wasted on it.
	if info, err := os.Stat(o.Dir); err != nil || !info.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return nil, nil, &StepError{Step: "checking --dir " + o.Dir, Err: err}
	}
	return tlsCfg, s3cli, nil
}

// saveSnapshot streams a snapshot from cli (endpoint ep) into a temporary
// file in --dir, verifies it and renames it to its final name for now; a
// failure leaves no temporary file behind.
func saveSnapshot(ctx context.Context, o SnapshotOptions, cli *clientv3.Client, ep string, now time.Time, lg *zap.Logger) (Status, error) {
	fail := func(step string, err error) (Status, error) {
		return Status{}, &StepError{Endpoint: ep, Step: step, Err: err}
	}
	final := filepath.Join(o.Dir, SnapshotName(o.Prefix, now))
	tmp := filepath.Join(o.Dir, TempName(o.Prefix, now))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fail("creating the temporary file", err)
	}
	kept := false
	defer func() {
		if !kept {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()

	lg.Info("streaming snapshot", zap.String("endpoint", ep), zap.String("file", tmp))
	start := time.Now()
	resp, err := cli.SnapshotWithVersion(ctx)
	if err != nil {
		return fail("opening the snapshot stream", err)
	}
	n, err := io.Copy(f, resp.Snapshot)
	_ = resp.Snapshot.Close()
	if err != nil {
		return fail(fmt.Sprintf("streaming the snapshot (%d bytes received)", n), err)
	}
	if err := f.Sync(); err != nil {
		return fail("fsync of the temporary file", err)
	}
	if err := f.Close(); err != nil {
		return fail("closing the temporary file", err)
	}
	lg.Info("snapshot received", zap.String("endpoint", ep), zap.Int64("bytes", n),
		zap.Duration("took", time.Since(start)), zap.String("etcdVersion", resp.Version))

	st, err := Verify(tmp, lg)
	if err != nil {
		return fail("verifying the snapshot", err)
	}
	if err := renameNoReplace(tmp, final); err != nil {
		return fail("renaming the snapshot into place", err)
	}
	kept = true
	if err := syncDir(o.Dir); err != nil {
		return fail("fsync of --dir after the rename", err)
	}
	lg.Info("snapshot saved", zap.String("file", final), zap.Int64("revision", st.Revision), zap.Int("keys", st.TotalKey))
	return st, nil
}

// pickEndpoint returns a client of the first endpoint, in order, that
// answers a Status call within the dial timeout. The snapshot must come
// from one member (it is that member's point-in-time state), so each
// client has exactly one endpoint and cannot fail over mid-stream.
func pickEndpoint(ctx context.Context, o SnapshotOptions, tlsCfg *tls.Config, lg *zap.Logger) (*clientv3.Client, string, error) {
	var tried []string
	for _, ep := range o.Endpoints {
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:   []string{ep},
			DialTimeout: o.DialTimeout,
			TLS:         tlsCfg.Clone(),
			// The client logs every failed dial at info; the error below
			// says the same once.
			Logger: lg.Named("etcd-client").WithOptions(zap.IncreaseLevel(zap.ErrorLevel)),
		})
		if err != nil {
			tried = append(tried, ep+": client: "+err.Error())
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
		st, err := cli.Status(sctx, ep)
		cancel()
		if err != nil {
			_ = cli.Close()
			lg.Warn("endpoint did not answer status", zap.String("endpoint", ep), zap.Error(err))
			tried = append(tried, ep+": status: "+err.Error())
			if ctx.Err() != nil {
				break
			}
			continue
		}
		lg.Info("endpoint answered status", zap.String("endpoint", ep), zap.String("version", st.Version),
			zap.Int64("dbSize", st.DbSize), zap.Int64("revision", st.Header.GetRevision()), zap.Strings("errors", st.Errors))
		return cli, ep, nil
	}
	return nil, "", &StepError{Step: "choosing an endpoint", Err: errors.New("no endpoint answered a Status call: " + strings.Join(tried, "; "))}
}

// applyRetention deletes the snapshots beyond o.Retain and stale temporary
// files of the prefix (PlanRetention decides), then fsyncs o.Dir. It
// returns how many snapshots of the prefix are left and which it deleted,
// also when it stops at an error.
func applyRetention(o SnapshotOptions, current string, lg *zap.Logger) (kept int, deleted []string, err error) {
	dirents, err := os.ReadDir(o.Dir)
	if err != nil {
		return 1, nil, err
	}
	entries := make([]Entry, 0, len(dirents))
	for _, d := range dirents {
		e := Entry{Name: d.Name(), Regular: d.Type().IsRegular()}
		if e.Regular {
			info, err := d.Info()
			if err != nil {
				continue // removed meanwhile
			}
			e.ModTime = info.ModTime()
		}
		entries = append(entries, e)
	}
	plan := PlanRetention(o.Prefix, entries, current, o.Retain, time.Now(), o.Timeout)
	kept, deleted, err = plan.DeleteSnapshots(func(name string) error {
		if err := os.Remove(filepath.Join(o.Dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		lg.Info("retention deleted a snapshot or its key file", zap.String("file", name))
		return nil
	})
	if err != nil {
		return kept, deleted, err
	}
	for _, name := range append(plan.StaleTemps, plan.OrphanKeys...) {
		if err := os.Remove(filepath.Join(o.Dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return kept, deleted, err
		}
		lg.Info("retention deleted a stale temporary file or a key file without its snapshot", zap.String("file", name))
	}
	if len(plan.Delete)+len(plan.StaleTemps)+len(plan.OrphanKeys) > 0 {
		if err := syncDir(o.Dir); err != nil {
			return kept, deleted, err
		}
	}
	return kept, deleted, nil
}

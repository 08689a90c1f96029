package etcdsnapshot

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"go.uber.org/zap"
)

// NewS3Client is a client of o.Endpoint with o's static credentials: TLS
// 1.2 or later for https, checked against o.CAFile when it is given and
// the system roots otherwise; path- or virtual-host-style bucket lookup as
// the endpoint supports. It dials nothing. o must be valid.
func NewS3Client(o S3Options) (*minio.Client, error) {
	u, err := url.Parse(o.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("--s3-endpoint: %w", err)
	}
	secure := u.Scheme == "https"
	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, err
	}
	if secure {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if o.CAFile != "" {
			if cfg.RootCAs, err = caPool("--s3-ca-file", o.CAFile); err != nil {
				return nil, err
			}
		}
		tr.TLSClientConfig = cfg
	}
	c := o.Credentials
	cli, err := minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(c.AccessKeyID, c.SecretAccessKey, c.SessionToken),
		Secure:       secure,
		Transport:    tr,
		Region:       o.Region,
		BucketLookup: minio.BucketLookupAuto,
	})
	if err != nil {
		return nil, c.redact(err)
	}
	return cli, nil
}

// redactedError is an error whose message had the credentials cut out. It
// does not unwrap: the original error could be printed through it.
type redactedError struct{ msg string }

func (e *redactedError) Error() string { return e.msg }

// redact returns err with every credential value replaced by "[redacted]"
// in its message. S3 errors quote the server's message, never the request's
// signature; this holds the line even against a server or client that
// would.
func (c S3Credentials) redact(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, s := range []string{c.SecretAccessKey, c.SessionToken, c.AccessKeyID} {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "[redacted]")
		}
	}
	return &redactedError{msg: msg}
}

// uploadSnapshot puts the verified snapshot file path into the bucket as
// o.S3.Key(name), after its key file (res.Keys, when there is one) as
// o.S3.Key(res.Keys): a snapshot object never exists without its keys'.
// Each object's size is checked against the file's; then retention is
// applied in the bucket, and res's Bucket, Object, KeysObject, Kept and
// Deleted are filled in. S3 makes an object visible only when its upload
// completes, so a failed upload leaves nothing under the key.
func uploadSnapshot(ctx context.Context, o SnapshotOptions, cli *minio.Client, path, name string, res *SnapshotResult, lg *zap.Logger) error {
	s3o := o.S3
	if res.Keys != "" {
		if err := putFile(ctx, s3o, cli, filepath.Join(filepath.Dir(path), res.Keys), s3o.Key(res.Keys), lg); err != nil {
			return err
		}
		res.KeysObject = s3o.Key(res.Keys)
	}
	key := s3o.Key(name)
	if err := putFile(ctx, s3o, cli, path, key, lg); err != nil {
		return err
	}
	res.Bucket, res.Object = s3o.Bucket, key

	kept, deleted, err := s3Retention(ctx, o, cli, name, lg)
	res.Kept, res.Deleted = kept, deleted
	if err != nil {
		return &StepError{Step: "retention in s3://" + s3o.Bucket + "/" + s3o.Prefix + " (snapshot " + key + " was uploaded)",
			Err: s3o.Credentials.redact(err)}
	}
	return nil
}

// putFile uploads the file at path as the object key and checks the
// stored object's size against the file's.
func putFile(ctx context.Context, s3o S3Options, cli *minio.Client, path, key string, lg *zap.Logger) error {
	where := "s3://" + s3o.Bucket + "/" + key
	fail := func(step string, err error) error {
		return &StepError{Step: step, Err: s3o.Credentials.redact(err)}
	}
	f, err := os.Open(path)
	if err != nil {
		return fail("uploading to "+where, err)
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return fail("uploading to "+where, err)
	}
	size := info.Size()
	lg.Info("uploading", zap.String("s3Endpoint", s3o.Endpoint), zap.String("object", where), zap.Int64("bytes", size))
	start := time.Now()
	// Content-MD5 on the body (and on each part of a multipart upload):
	// the server refuses a body that differs from what was read here.
	if _, err := cli.PutObject(ctx, s3o.Bucket, key, f, size, minio.PutObjectOptions{
		ContentType:    "application/octet-stream",
		SendContentMd5: true,
	}); err != nil {
		return fail("uploading to "+where, err)
	}
	st, err := cli.StatObject(ctx, s3o.Bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return fail("checking the uploaded object "+where, err)
	}
	if st.Size != size {
		return fail("checking the uploaded object "+where, fmt.Errorf("the bucket holds %d bytes, the file %d", st.Size, size))
	}
	lg.Info("uploaded", zap.String("object", where), zap.Int64("bytes", size), zap.Duration("took", time.Since(start)))
	return nil
}

// s3Retention is applyRetention in the bucket: the objects under
// --s3-prefix whose names (the rest of the key) are exactly what Save
// writes for --prefix count, PlanRetention decides, and the snapshots
// beyond o.Retain are removed, oldest first. Nothing else in the bucket is
// touched. A bucket has no temporary names, so the plan's StaleTemps are
// ignored.
func s3Retention(ctx context.Context, o SnapshotOptions, cli *minio.Client, current string, lg *zap.Logger) (kept int, deleted []string, err error) {
	s3o := o.S3
	lctx, cancel := context.WithCancel(ctx) // stops the lister if the loop returns early
	defer cancel()
	var entries []Entry
	// Snapshot names hold no '/', so one level is all there is to list.
	for obj := range cli.ListObjects(lctx, s3o.Bucket, minio.ListObjectsOptions{Prefix: s3o.Prefix + o.Prefix}) {
		if obj.Err != nil {
			return 1, []string{}, obj.Err
		}
		name, ok := strings.CutPrefix(obj.Key, s3o.Prefix)
		if !ok {
			continue
		}
		// A common prefix ("folder") is listed as a key ending in '/'.
		entries = append(entries, Entry{Name: name, Regular: !strings.HasSuffix(name, "/"), ModTime: obj.LastModified})
	}
	plan := PlanRetention(o.Prefix, entries, current, o.Retain, time.Now(), o.Timeout)
	remove := func(name string) error {
		if err := cli.RemoveObject(ctx, s3o.Bucket, s3o.Key(name), minio.RemoveObjectOptions{}); err != nil {
			return err
		}
		lg.Info("retention deleted an object in the bucket", zap.String("object", "s3://"+s3o.Bucket+"/"+s3o.Key(name)))
		return nil
	}
	kept, deleted, err = plan.DeleteSnapshots(remove)
	if err != nil {
		return kept, deleted, err
	}
	for _, name := range plan.OrphanKeys {
		if err := remove(name); err != nil {
			return kept, deleted, err
		}
	}
	return kept, deleted, nil
}

package etcdsnapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/minio/minio-go/v7"
	"go.uber.org/zap"

	"github.com/kubefarm/kubefarm/internal/backupkeys"
)

// MaxFetchedSnapshot bounds a snapshot downloaded for a restore: etcd's
// largest quota (8 GiB) and room for the database's free pages. An object
// larger than this is not a snapshot of a tenant's etcd.
const MaxFetchedSnapshot int64 = 10 << 30

// FetchFromS3 downloads the object key of o's bucket to path, at most
// limit bytes: into a hidden temporary file beside it, checked against the
// object's size, fsynced and renamed into place, so a download cut short
// never leaves a file that looks whole. A missing object is an error that
// wraps fs.ErrNotExist. Nothing in the bucket is changed.
func FetchFromS3(ctx context.Context, o S3Options, key, path string, limit int64, lg *zap.Logger) error {
	where := "s3://" + o.Bucket + "/" + key
	fail := func(err error) error {
		return &StepError{Step: "downloading " + where, Err: o.Credentials.redact(err)}
	}
	cli, err := NewS3Client(o)
	if err != nil {
		return fail(err)
	}
	st, err := cli.StatObject(ctx, o.Bucket, key, minio.StatObjectOptions{})
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return &StepError{Step: "downloading " + where, Err: fmt.Errorf("no such object: %w", fs.ErrNotExist)}
		}
		return fail(err)
	}
	if st.Size > limit {
		return fail(fmt.Errorf("the object is %d bytes, more than %d", st.Size, limit))
	}
	obj, err := cli.GetObject(ctx, o.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return fail(err)
	}
	defer func() { _ = obj.Close() }()
	lg.Info("downloading", zap.String("object", where), zap.Int64("bytes", st.Size))
	start := time.Now()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+tempSuffix)
	if err := writeFetched(tmp, io.LimitReader(obj, limit+1), st.Size); err != nil {
		_ = os.Remove(tmp)
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fail(err)
	}
	lg.Info("downloaded", zap.String("object", where), zap.String("file", path), zap.Duration("took", time.Since(start)))
	return nil
}

// writeFetched writes r to file, which must come out at exactly size
// bytes, and fsyncs it.
func writeFetched(file string, r io.Reader, size int64) error {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, r)
	if err == nil && n != size {
		err = fmt.Errorf("read %d bytes, the object has %d", n, size)
	}
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// FetchPair downloads the snapshot named name (under o's prefix) and its
// key file into dir for a restore's check, and returns their paths. A
// missing snapshot is Preflight's SnapshotMissing; a missing key file is
// left absent, which Preflight reports as the key file missing.
func FetchPair(ctx context.Context, o S3Options, name, dir string, lg *zap.Logger) (snapshot, keys string, err error) {
	snapshot, keys = filepath.Join(dir, name), filepath.Join(dir, KeysName(name))
	if err := FetchFromS3(ctx, o, o.Key(name), snapshot, MaxFetchedSnapshot, lg); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = &backupkeys.Error{Reason: ReasonSnapshotMissing, Err: err}
		}
		return "", "", err
	}
	if err := FetchFromS3(ctx, o, o.Key(KeysName(name)), keys, backupkeys.MaxFileSize, lg); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", "", err
	}
	return snapshot, keys, nil
}

// ValidateFetchName checks a snapshot's name given with --s3-bucket: a
// plain file name, joined to --s3-prefix for the object and to the
// download directory for the file.
func ValidateFetchName(name string) error {
	if name == "" || name != filepath.Base(name) || name[0] == '.' || len(name) > 255 {
		return fmt.Errorf("--snapshot %q: with --s3-bucket, the snapshot's name after --s3-prefix, a plain file name", name)
	}
	return nil
}

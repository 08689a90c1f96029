// Package etcdsnapshot is the library behind kubefarm-etcd, the backup and
// restore tool of a tenant control plane's etcd (docs/etcd.md, "Backup and
// restore tool").
//
// The pure parts decide: snapshot file names (names.go), which snapshots
// retention deletes (retention.go), flag validation and the parsers of
// --endpoints and --initial-cluster (options.go), and the bounded JSON
// result lines (result.go). The rest does the file and network work with
// etcd's own libraries: Save streams a snapshot from one member over TLS
// with go.etcd.io/etcd/client/v3, Verify checks a snapshot file (the
// sha256 trailer etcd appends to the stream, then etcdutl's snapshot
// status, which walks the bbolt file), and Restore turns a verified
// snapshot into a member's data directory with etcdutl's Restore.
// EncryptedValues (encrypted.go) reads a verified snapshot's database for
// one value per encryption key its values name, which a restore's
// preflight (internal/backupkeys.Check) tries the backed-up keys on.
//
// With S3Options (--s3-*, s3options.go validates them) Save then uploads
// the verified file to an S3-compatible bucket with minio-go (s3.go):
// Content-MD5 on the body, the stored size read back, and retention in
// the bucket by the same PlanRetention. The credentials come from the
// environment only and never reach a log line, a result or an error.
//
// The safety rules, which the tests hold them to:
//   - a snapshot is verified before it gets its final name, so a truncated
//     or corrupted stream is never kept under a name retention counts;
//   - names change by atomic rename, followed by an fsync of the directory,
//     so a crash leaves either the old state or the new, never half of one;
//   - retention deletes only files (and, in a bucket, objects under
//     --s3-prefix) whose names are exactly what Save writes for the prefix,
//     and never the snapshot just written;
//   - an upload is checked (Content-MD5, then the stored size) before
//     retention in the bucket runs;
//   - Restore never touches a data directory that already holds a member.
package etcdsnapshot

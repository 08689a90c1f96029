package etcdsnapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// Status is what Verify found in a snapshot file.
type Status struct {
	// Size is the file's size, the sha256 trailer included.
	Size int64
	// Revision, TotalKey and Hash are etcdutl's snapshot status: the
	// latest revision in the file, the live keys, and a CRC of every
	// bucket's contents.
	Revision int64
	TotalKey int
	Hash     uint32
	// Version is the storage version etcd recorded (empty before v3.6).
	Version string
	// SHA256 is the hex sha256 of the whole file, trailer included: what
	// a key file is bound to (computed in the same read as the trailer
	// check, so a snapshot is read once for both).
	SHA256 string
}

// Verify checks a snapshot file as etcd streamed it, in two steps:
//
//  1. etcd ends the stream with the sha256 of the database before it, and
//     sizes the database in whole 512-byte sectors, so a whole stream is
//     n*512+32 bytes and its last 32 bytes are the sha256 of the rest. A
//     truncated stream fails one or the other; a flipped bit fails the
//     hash. (etcdutl's Restore checks the same trailer; its Status does
//     not, which is why this step comes first: bbolt maps the file and
//     reads pages past the end of a truncated one, a SIGSEGV that kills
//     the process rather than an error, seen here with a snapshot cut in
//     half.)
//  2. etcdutl's snapshot status opens the database with bbolt, checks the
//     consistency of its pages and reads every bucket: the file is a
//     database etcd can start on, and it tells the revision.
//
// A database file copied out of a member's data directory has no trailer
// and fails step 1: it may have been copied mid-write, and nothing can
// tell.
func Verify(path string, lg *zap.Logger) (Status, error) {
	size, sum, err := checkTrailer(path)
	if err != nil {
		return Status{}, err
	}
	st, err := snapshot.NewV3(lg).Status(path)
	if err != nil {
		return Status{}, fmt.Errorf("snapshot status of %s: %w", path, err)
	}
	return Status{Size: size, Revision: st.Revision, TotalKey: st.TotalKey, Hash: st.Hash, Version: st.Version, SHA256: sum}, nil
}

// checkTrailer is Verify's first step; it returns the file's size and the
// hex sha256 of the whole file.
func checkTrailer(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, "", err
	}
	size := info.Size()
	if !info.Mode().IsRegular() {
		return 0, "", fmt.Errorf("%s is not a regular file", path)
	}
	if size < 512+sha256.Size || size%512 != sha256.Size {
		return size, "", fmt.Errorf("%s: %d bytes is not a whole snapshot stream (512-byte sectors and a 32-byte sha256 trailer): truncated, or a database copied from a data directory", path, size)
	}
	h, whole := sha256.New(), sha256.New()
	if _, err := io.CopyN(io.MultiWriter(h, whole), f, size-sha256.Size); err != nil {
		return size, "", fmt.Errorf("reading %s: %w", path, err)
	}
	trailer := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, trailer); err != nil {
		return size, "", fmt.Errorf("reading %s: %w", path, err)
	}
	if !bytes.Equal(h.Sum(nil), trailer) {
		return size, "", fmt.Errorf("%s: sha256 of the database does not match the trailer etcd sent: the file is corrupted", path)
	}
	whole.Write(trailer)
	return size, hex.EncodeToString(whole.Sum(nil)), nil
}

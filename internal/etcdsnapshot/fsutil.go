package etcdsnapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// syncDir makes the directory's entries (a rename, a new or removed file)
// durable: without it a crash right after a rename can bring the old name
// back even though the file's data reached the disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return d.Close()
}

// renameNoReplace renames oldpath to newpath atomically and fails with
// fs.ErrExist when newpath exists: a snapshot must never replace another
// (two runs in one second), and a restore must never replace a data
// directory that appeared in the meantime. File systems without
// RENAME_NOREPLACE (some network file systems) get a check and a plain
// rename; the gap between the two only matters to two runs racing on one
// name, which the one CronJob per tenant does not start.
func renameNoReplace(oldpath, newpath string) error {
	err := unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EEXIST):
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: fs.ErrExist}
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EOPNOTSUPP):
		if _, err := os.Lstat(newpath); err == nil {
			return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: fs.ErrExist}
		}
		return os.Rename(oldpath, newpath)
	default:
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
}

// syncTree fsyncs every file and directory under root, so that the tree is
// on disk before it is renamed into place; the rename is only as durable
// as what it points to.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			_ = f.Close()
			return fmt.Errorf("fsync %s: %w", path, err)
		}
		return f.Close()
	})
}

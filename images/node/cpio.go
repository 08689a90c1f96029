package nodeimage

import (
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/kubefarm/kubefarm/internal/newc"
)

// WriteInitramfs writes the tree under dir to w as a gzip-compressed "newc"
// cpio archive, the format the kernel unpacks into its initramfs
// (Documentation/driver-api/early-userspace/buffer-format.rst).
//
// The output depends only on the tree's names, contents, modes and symlink
// targets: entries are sorted by path, owned by root, stamped with mtime,
// numbered from 1, and the gzip header carries no name or time. busybox cpio
// copies inode numbers, owners and times from the build host, so two builds
// of the same tree would differ; this does not.
//
// A /dev/console character device (5,1) is added: the kernel opens it for
// init before anything is mounted.
func WriteInitramfs(w io.Writer, dir string, mtime int64) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel != "." {
			paths = append(paths, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return err
	}
	hasDev := false
	for _, p := range paths {
		if p == "dev" {
			hasDev = true
		}
		if p == "dev/console" {
			return fmt.Errorf("%s: dev/console is added by the writer", dir)
		}
	}
	if !hasDev {
		paths = append(paths, "dev")
	}
	paths = append(paths, "dev/console")
	sort.Strings(paths)

	zw, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	cw := newc.NewWriter(zw, mtime)
	for _, p := range paths {
		switch p {
		case "dev/console":
			cw.Add(p, 0o020600, nil, 5, 1)
			continue
		case "dev":
			if !hasDev {
				cw.Add(p, 0o040755, nil, 0, 0)
				continue
			}
		}
		full := filepath.Join(dir, filepath.FromSlash(p))
		fi, err := os.Lstat(full)
		if err != nil {
			return err
		}
		perm := uint32(fi.Mode().Perm())
		switch {
		case fi.Mode().IsDir():
			cw.Add(p, 0o040000|perm, nil, 0, 0)
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(full)
			if err != nil {
				return err
			}
			cw.Add(p, 0o100000|perm, b, 0, 0)
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(full)
			if err != nil {
				return err
			}
			cw.Add(p, 0o120777, []byte(t), 0, 0)
		default:
			return fmt.Errorf("%s: unsupported file type %v", full, fi.Mode().Type())
		}
	}
	if err := cw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

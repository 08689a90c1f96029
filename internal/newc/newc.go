// Package newc writes the "newc" cpio format the Linux kernel unpacks into
// its initramfs (Documentation/driver-api/early-userspace/buffer-format.rst).
//
// It is the one writer of that format in kubefarm: the node image's initrd,
// the per-boot secret archive kubefarm-pxe serves beside it, and the test
// harness's tiny initrds all go through it. Entries are owned by root and
// numbered from 1 in the order they are added, so the output depends only
// on what is added.
package newc

import (
	"fmt"
	"io"
)

// File type bits of an entry's mode.
const (
	TypeDir     = 0o040000
	TypeRegular = 0o100000
	TypeSymlink = 0o120000
	TypeCharDev = 0o020000
)

// Writer writes entries to W. The first write error sticks and is returned
// by Close; the methods before it do nothing after an error.
type Writer struct {
	w     io.Writer
	mtime int64
	ino   int
	n     int64
	err   error
}

// NewWriter writes to w, stamping every entry with mtime (seconds).
func NewWriter(w io.Writer, mtime int64) *Writer { return &Writer{w: w, mtime: mtime} }

func (c *Writer) write(b []byte) {
	if c.err != nil {
		return
	}
	var n int
	n, c.err = c.w.Write(b)
	c.n += int64(n)
}

func (c *Writer) pad() {
	if r := c.n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// Add writes one entry; mode carries the file type bits (Type*), rdev the
// device numbers of a device node.
func (c *Writer) Add(name string, mode uint32, data []byte, rdevMajor, rdevMinor int) {
	c.ino++
	nlink := 1
	if mode&0o170000 == TypeDir {
		nlink = 2
	}
	c.entry(c.ino, name, mode, nlink, c.mtime, data, rdevMajor, rdevMinor)
}

// Dir adds a directory with mode 0755.
func (c *Writer) Dir(name string) { c.Add(name, TypeDir|0o755, nil, 0, 0) }

func (c *Writer) entry(ino int, name string, mode uint32, nlink int, mtime int64, data []byte, rdevMajor, rdevMinor int) {
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, mtime, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad()
	c.write(data)
	c.pad()
}

// Close writes the trailer (inode 0, time 0) and returns the first error.
// It does not close the underlying writer.
func (c *Writer) Close() error {
	c.entry(0, "TRAILER!!!", 0, 1, 0, nil, 0, 0)
	return c.err
}

// Package nodeimage holds the Go side of the node image recipe in this
// folder (build.sh): a deterministic initramfs writer, the pause image
// tarball the image preloads, and the image manifest (what build.sh writes
// next to vmlinuz, initrd and rootfs.squashfs, and what the tests check).
// The command that drives them is ./cmd/nodeimage; the initrd's download
// and verification step is ./cmd/kubefarm-fetch. See README.md.
package nodeimage

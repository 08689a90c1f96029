//go:build multiarch

package bootchain

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kubefarm/kubefarm/internal/testing/testenv"
	"github.com/kubefarm/kubefarm/pxe/bootfile"
	"github.com/kubefarm/kubefarm/pxe/tftp"
)

// ARM64NICModules are the arm64 machine's NIC drivers: virtio-net on PCI.
// Debian's arm64 kernel has the virt board's PCI host (pci-host-generic)
// and virtio's core built in; these two and their dependencies are
// modules.
var ARM64NICModules = []string{"virtio_pci", "virtio_net"}

// arm64VM is an arm64 UEFI machine: qemu's virt board, EDK2's firmware
// netbooting a virtio-net NIC without option ROM.
var arm64VM = vm{name: "arm64", mac: "52:54:00:77:00:14", ip: "10.77.0.14", uefi: true, arch: "arm64"}

// TestBootChainARM64 boots an arm64 UEFI machine from kubefarm-pxe (see
// doc.go): its firmware's DHCP says client architecture 11, it is sent to
// ipxe-arm64.efi over TFTP (make ipxe-arm64's build, where
// KUBEFARM_IPXE_ARM64 says or in bin/ipxe), whose script's architecture
// check passes for an arm64 BootImage; iPXE fetches Debian's arm64 kernel
// and the test's initrd by digest, and the initrd reports back.
//
// Build tag multiarch: go test ./... and make test leave it out (ten
// minutes of emulation they have no room for); make test-arm64 runs it.
func TestBootChainARM64(t *testing.T) {
	requireFacility(t, "arm64")
	ipxe := arm64IPXE(t)
	// The watch client logs through controller-runtime; nothing to say here.
	ctrllog.SetLogger(logr.Discard())
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	a := prepareArtifacts(ctx, t, "arm64", ARM64NICModules)
	c := newChain(ctx, t, start, a)
	img := c.createImage(ctx, t, "bootchain-arm64", "arm64", a)
	// ttyAMA0: the virt board's PL011 UART, qemu's -serial. panic=-1 with
	// qemu's -no-reboot: a panic ends the VM at once.
	c.createPool(ctx, t, "arm", img, []string{"console=ttyAMA0", "panic=-1"}, arm64VM)
	c.startPXE(ctx, t, ipxeFolder(t, ipxe), arm64VM)
	t.Logf("kubefarm-pxe serving after %s", time.Since(start).Round(time.Millisecond))

	t.Run("ARM64 UEFI", func(t *testing.T) { c.boot(t, arm64VM) })
	t.Logf("whole test: %s", time.Since(start).Round(time.Millisecond))
}

// arm64IPXE is the arm64 iPXE under test: KUBEFARM_IPXE_ARM64, which make
// test-arm64 sets, else make ipxe-arm64's output in this checkout.
func arm64IPXE(t *testing.T) string {
	t.Helper()
	path := os.Getenv("KUBEFARM_IPXE_ARM64")
	if path == "" {
		root, err := testenv.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		path = filepath.Join(root, "bin", "ipxe", bootfile.BinaryUEFIARM64)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the arm64 iPXE: %v (make ipxe-arm64 builds it; make test-arm64 does it first)", err)
	}
	return path
}

// ipxeFolder is kubefarm-pxe's --ipxe-dir for the test: Debian's x86
// binaries and the arm64 one, as the kubefarm-pxe image carries them
// (hack/release).
func ipxeFolder(t *testing.T, arm64 string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range tftp.DefaultFiles {
		src := filepath.Join(ipxeDir, name)
		if name == bootfile.BinaryUEFIARM64 {
			src = arm64
		}
		if err := copyFile(src, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

package release

import (
	"crypto/sha256"
	"debug/pe"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/kubefarm/kubefarm/pxe/bootfile"
	"github.com/kubefarm/kubefarm/pxe/tftp"
)

// Binaries are the project's commands the released images carry.
var Binaries = []Binary{
	{"kubefarm-manager", "./cmd/kubefarm-manager"},
	{"kubefarm-etcd", "./cmd/kubefarm-etcd"},
	{"kubefarm-pxe", "./cmd/kubefarm-pxe"},
	{"kubefarm-agent", "./cmd/kubefarm-agent"},
}

// ImageSpec is one released image: its files, given the folder holding
// one architecture's binaries.
type ImageSpec struct {
	Name       string // repository base name, e.g. kubefarm-manager
	Entrypoint []string
	Files      func(binDir string) ([]File, error)
}

// ProjectImages are the images a release ships (and the e2e cluster runs):
//   - kubefarm-manager also carries kubefarm-etcd, the tenants' etcd backup
//     and restore tool, which the snapshot CronJobs and the etcd members'
//     restore init containers run from this image with their own command:
//     one image to pin and mirror, and the tool always matches the manager
//     that writes its flags. The entrypoint stays the manager's.
//   - kubefarm-pxe carries the iPXE binaries it serves (IPXEFiles, from
//     ipxe): machine code for the clients, so the same files go into every
//     architecture's image.
//   - kubefarm-agent is the node agent, for those who build their own node
//     images (COPY --from it).
func ProjectImages(ipxe IPXESources) []ImageSpec {
	bin := func(dir, name string) File {
		return File{Path: "/usr/local/bin/" + name, Source: filepath.Join(dir, name), Mode: 0o755}
	}
	return []ImageSpec{
		{Name: "kubefarm-manager", Entrypoint: []string{"/usr/local/bin/kubefarm-manager"}, Files: func(dir string) ([]File, error) {
			return []File{bin(dir, "kubefarm-manager"), bin(dir, "kubefarm-etcd")}, nil
		}},
		{Name: "kubefarm-pxe", Entrypoint: []string{"/usr/local/bin/kubefarm-pxe"}, Files: func(dir string) ([]File, error) {
			files, err := IPXEFiles(ipxe)
			if err != nil {
				return nil, err
			}
			return append([]File{bin(dir, "kubefarm-pxe")}, files...), nil
		}},
		{Name: "kubefarm-agent", Entrypoint: []string{"/usr/local/bin/kubefarm-agent"}, Files: func(dir string) ([]File, error) {
			return []File{bin(dir, "kubefarm-agent")}, nil
		}},
	}
}

// IPXEDir is where Debian's ipxe package installs the iPXE binaries on the
// build machine, and where the kubefarm-pxe image carries them: the
// directory kubefarm-pxe serves by default (--ipxe-dir, the chart's
// pxe.ipxe.dir).
const IPXEDir = tftp.DefaultDir

// IPXEARM64Build is where `make ipxe-arm64` writes the arm64 UEFI iPXE,
// relative to the checkout.
const IPXEARM64Build = "bin/ipxe/" + bootfile.BinaryUEFIARM64

// IPXESources say where the kubefarm-pxe image's iPXE binaries come from.
type IPXESources struct {
	// Dir holds the x86 binaries of the build machine's Debian ipxe
	// package; empty means IPXEDir.
	Dir string
	// ARM64 is the arm64 UEFI iPXE (make ipxe-arm64); Debian's package has
	// none. Empty or missing leaves it out, unless RequireARM64.
	ARM64 string
	// RequireARM64 fails without ARM64: a release's kubefarm-pxe must
	// serve arm64 machines. make images and the e2e cluster take it only
	// when built.
	RequireARM64 bool
}

// IPXEFiles are the iPXE binaries of the kubefarm-pxe image, every name
// kubefarm-pxe serves (the TFTP allow-list), all in IPXEDir: the x86 ones
// from src.Dir (required), the arm64 one from src.ARM64, checked to be an
// arm64 EFI application.
func IPXEFiles(src IPXESources) ([]File, error) {
	dir := src.Dir
	if dir == "" {
		dir = IPXEDir
	}
	var files []File
	for _, name := range tftp.DefaultFiles {
		from := filepath.Join(dir, name)
		if name == bootfile.BinaryUEFIARM64 {
			from = src.ARM64
			if err := checkARM64EFI(from); err != nil {
				if !src.RequireARM64 && errors.Is(err, fs.ErrNotExist) {
					continue
				}
				return nil, fmt.Errorf("arm64 iPXE (make ipxe-arm64 builds %s): %w", IPXEARM64Build, err)
			}
		} else if _, err := os.Stat(from); err != nil {
			return nil, fmt.Errorf("iPXE binary %s (Debian package ipxe; make deps installs it): %w", from, err)
		}
		// By content in a cache key: a package upgrade or a rebuild that
		// keeps sizes and times still rebuilds the image.
		files = append(files, File{Path: IPXEDir + "/" + name, Source: from, Mode: 0o644, HashContent: true})
	}
	return files, nil
}

// checkARM64EFI fails unless path is a PE image for arm64 (machine 0xaa64),
// which the firmware of an ARM64 machine can start: a file of another
// architecture would be served and fail on the machine.
func checkARM64EFI(path string) error {
	if path == "" {
		return fmt.Errorf("no file given: %w", fs.ErrNotExist)
	}
	f, err := pe.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return fmt.Errorf("%s is not an EFI (PE) image: %w", path, err)
	}
	defer f.Close()
	if m := f.FileHeader.Machine; m != pe.IMAGE_FILE_MACHINE_ARM64 {
		return fmt.Errorf("%s is a PE image for machine %#x, not arm64 (%#x)", path, m, pe.IMAGE_FILE_MACHINE_ARM64)
	}
	return nil
}

func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// isLoopback says whether a repository's registry is this machine's
// loopback, which Helm's client must reach over plain HTTP (go-containerregistry
// decides that by itself).
func isLoopback(repo string) bool {
	host := strings.SplitN(repo, "/", 2)[0]
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

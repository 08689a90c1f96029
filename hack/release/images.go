package release

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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
//   - kubefarm-pxe carries the iPXE binaries it serves, from the build
//     machine's Debian ipxe package (machine code for the clients, so the
//     same files go into every architecture's image).
//   - kubefarm-agent is the node agent, for those who build their own node
//     images (COPY --from it).
func ProjectImages() []ImageSpec {
	bin := func(dir, name string) File {
		return File{Path: "/usr/local/bin/" + name, Source: filepath.Join(dir, name), Mode: 0o755}
	}
	return []ImageSpec{
		{Name: "kubefarm-manager", Entrypoint: []string{"/usr/local/bin/kubefarm-manager"}, Files: func(dir string) ([]File, error) {
			return []File{bin(dir, "kubefarm-manager"), bin(dir, "kubefarm-etcd")}, nil
		}},
		{Name: "kubefarm-pxe", Entrypoint: []string{"/usr/local/bin/kubefarm-pxe"}, Files: func(dir string) ([]File, error) {
			ipxe, err := IPXEFiles()
			if err != nil {
				return nil, err
			}
			return append([]File{bin(dir, "kubefarm-pxe")}, ipxe...), nil
		}},
		{Name: "kubefarm-agent", Entrypoint: []string{"/usr/local/bin/kubefarm-agent"}, Files: func(dir string) ([]File, error) {
			return []File{bin(dir, "kubefarm-agent")}, nil
		}},
	}
}

// IPXEDir is where Debian's ipxe package installs the iPXE binaries on the
// build machine, and where the kubefarm-pxe image carries them (the
// chart's pxe.ipxe.dir).
const IPXEDir = tftp.DefaultDir

// IPXEFiles are the iPXE binaries copied from the build machine's Debian
// ipxe package into the kubefarm-pxe image: every name kubefarm-pxe serves
// (the TFTP allow-list) that the package ships. The x86 ones are required;
// the arm64 one is taken when present (Debian's amd64 ipxe package has
// none).
func IPXEFiles() ([]File, error) {
	var files []File
	for _, name := range tftp.DefaultFiles {
		src := filepath.Join(IPXEDir, name)
		if _, err := os.Stat(src); err != nil {
			if name == bootfile.BinaryUEFIARM64 && os.IsNotExist(err) {
				continue
			}
			return nil, fmt.Errorf("iPXE binary %s (Debian package ipxe; make deps installs it): %w", src, err)
		}
		// By content in a cache key: a package upgrade that keeps sizes
		// and times still rebuilds the image.
		files = append(files, File{Path: IPXEDir + "/" + name, Source: src, Mode: 0o644, HashContent: true})
	}
	return files, nil
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

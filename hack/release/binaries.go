package release

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Binary is one of the project's commands an image carries.
type Binary struct {
	Name    string // file name, e.g. kubefarm-manager
	Package string // Go package, e.g. ./cmd/kubefarm-manager
}

// BuildFlags are the go build flags of every released binary: static
// (CGO off), no paths of the build machine (-trimpath), no VCS stamp and no
// build ID, so that two builds of the same commit are the same bytes and
// the images that carry them have the same digests.
var BuildFlags = []string{"-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid="}

// BuildBinaries builds each binary for linux/arch into outDir from the
// module at repoRoot and returns their paths by name.
func BuildBinaries(repoRoot, outDir, arch string, bins []Binary) (map[string]string, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	paths := map[string]string{}
	for _, b := range bins {
		out := filepath.Join(outDir, b.Name)
		args := append([]string{"build"}, BuildFlags...)
		args = append(args, "-o", out, b.Package)
		cmd := exec.Command("go", args...)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		if msg, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building %s for linux/%s: %v\n%s", b.Name, arch, err, msg)
		}
		paths[b.Name] = out
	}
	return paths, nil
}

package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kubefarm/kubefarm/hack/release"
)

// PreviousRelease is the commit whose operator the upgrade step installs
// before this checkout's: the previous release. The project tags no
// releases yet, so it is the last landed change; move it forward with
// each release.
const PreviousRelease = "6b0dc8279c6a1df3df202b76657c6588d5ba741a"

// PreviousChartVersion is the version the previous release's charts are
// pushed under, beside ChartVersion.
const PreviousChartVersion = "0.0.0-previous"

// PreviousChartRef is the previous release's chart name in the local registry.
func PreviousChartRef(name string) string {
	return "oci://" + ChartRegistry + "/" + name + ":" + PreviousChartVersion
}

// PreviousImages are the digests of the previous release's
// kubefarm-manager and kubefarm-pxe as PushPrevious pushed them, under
// ghcr.io/kubefarm/<name>:previous.
type PreviousImages struct {
	Manager, PXE string
}

// PushPrevious builds the previous release from the repository at
// repoRoot (its tree at PreviousRelease, taken with git archive), as a
// release builds it: its kubefarm-manager and
// kubefarm-pxe images with the release's flags, pushed to the local
// registry under the tag "previous", and its charts under
// PreviousChartVersion.
//
// A clone without that commit (a shallow one) builds the previous release
// from the checkout itself and says so in from: the upgrade is then
// between two releases of the same code (the chart's version and the
// images' tags still change).
func PushPrevious(ctx context.Context, repoRoot, workDir string) (prev *PreviousImages, from string, err error) {
	src := filepath.Join(workDir, "src")
	if err := os.RemoveAll(src); err != nil {
		return nil, "", err
	}
	from = PreviousRelease[:12]
	if err := exec.Command("git", "-C", repoRoot, "cat-file", "-e", PreviousRelease+"^{commit}").Run(); err != nil {
		from = "this checkout (commit " + PreviousRelease[:12] + " is not in the clone's history)"
		src = repoRoot
	} else if err := gitArchive(repoRoot, PreviousRelease, src); err != nil {
		return nil, "", err
	}
	bins := filepath.Join(workDir, "bin")
	var want []release.Binary
	for _, b := range release.Binaries {
		if b.Name != "kubefarm-agent" {
			want = append(want, b)
		}
	}
	if _, err := release.BuildBinaries(src, bins, "amd64", want); err != nil {
		return nil, "", fmt.Errorf("the previous release (%s): %w", from, err)
	}
	prev = &PreviousImages{}
	// The host's Debian iPXE binaries only: no machine boots from the
	// previous kubefarm-pxe (the upgrade step has no node pools).
	for _, spec := range release.ProjectImages(release.IPXESources{}) {
		var dst *string
		switch spec.Name {
		case "kubefarm-manager":
			dst = &prev.Manager
		case "kubefarm-pxe":
			dst = &prev.PXE
		default:
			continue
		}
		files, err := spec.Files(bins)
		if err != nil {
			return nil, "", err
		}
		img, err := release.BuildImage(files, spec.Entrypoint, "amd64")
		if err != nil {
			return nil, "", err
		}
		tag, err := name.NewTag(RegistryAddr+"/kubefarm/"+spec.Name+":previous", name.Insecure)
		if err != nil {
			return nil, "", err
		}
		if err := remote.Write(tag, img, remote.WithContext(ctx)); err != nil {
			return nil, "", fmt.Errorf("pushing the previous %s: %w", spec.Name, err)
		}
		d, err := img.Digest()
		if err != nil {
			return nil, "", err
		}
		*dst = d.String()
	}
	if err := pushCharts(src, PreviousChartVersion); err != nil {
		return nil, "", err
	}
	return prev, from, nil
}

// gitArchive writes commit's tree from the repository at repo into dir.
func gitArchive(repo, commit, dir string) error {
	cmd := exec.Command("git", "-C", repo, "archive", "--format=tar", commit)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	data, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git archive %s (the previous release must be in the clone's history): %v: %s", commit, err, strings.TrimSpace(stderr.String()))
	}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(path, filepath.Clean(dir)+string(os.PathSeparator)) {
			return fmt.Errorf("git archive: entry %q leaves %s", h.Name, dir)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o755|0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, path); err != nil {
				return err
			}
		}
	}
}

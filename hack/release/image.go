// Package release builds kubefarm's release artifacts: its images for
// several architectures as one multi-arch index each, an SBOM per image,
// the charts as OCI artifacts, and a manifest of every digest. The e2e
// cluster builds its images and installs its charts through it too, so the
// scenarios run what a release ships.
package release

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one file of an image's single layer.
type File struct {
	Path    string // inside the image
	Source  string // on the host; empty means Content
	Content string
	Mode    int64
	// HashContent keys an image cache on Source's bytes rather than its
	// size and modification time (for small inputs copied from packages).
	HashContent bool
}

// BuildImage is a one-layer image of files for linux/arch with entrypoint.
// It is reproducible: no timestamps enter the layer or the config, so the
// same files give the same digest.
func BuildImage(files []File, entrypoint []string, arch string) (v1.Image, error) {
	// The layer is built in memory: tarball layers are read lazily, after
	// this function returns, and the largest binary is ~100 MiB.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		// Parent directories first, as container runtimes expect.
		parts := strings.Split(strings.TrimPrefix(filepath.Dir(f.Path), "/"), "/")
		for i := range parts {
			d := strings.Join(parts[:i+1], "/")
			if d == "" || d == "." || dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
				return nil, err
			}
		}
		if err := addFile(tw, f); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", arch
	cfg.Config.Entrypoint = entrypoint
	cfg.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	// Force the layer to be compressed and digested now, so that a cached
	// layout holds the final bytes.
	if _, err := img.Digest(); err != nil {
		return nil, err
	}
	return img, nil
}

func addFile(tw *tar.Writer, f File) error {
	mode := f.Mode
	if mode == 0 {
		mode = 0o644
	}
	name := strings.TrimPrefix(f.Path, "/")
	if f.Source == "" {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(f.Content)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := io.WriteString(tw, f.Content)
		return err
	}
	src, err := os.Open(f.Source)
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return errors.New(f.Source + " is not a regular file")
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: st.Size(), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := io.Copy(tw, src); err != nil {
		return fmt.Errorf("%s: %w", f.Source, err)
	}
	return nil
}

package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kubefarm/kubefarm/hack/release"
)

// ServeRegistry runs an OCI registry on each of addrs with blobs on disk
// under dir, until one listener fails. It is the `registry` subcommand of
// cmd/e2e-cluster, started by Up.
func ServeRegistry(dir string, addrs ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	handler := registry.New(registry.WithBlobHandler(registry.NewDiskBlobHandler(dir)))
	errs := make(chan error, len(addrs))
	for _, a := range addrs {
		srv := &http.Server{Addr: a, Handler: handler, ReadHeaderTimeout: 10 * time.Second}
		go func() { errs <- fmt.Errorf("registry on %s: %w", a, srv.ListenAndServe()) }()
	}
	return <-errs
}

func (c *Cluster) startRegistry(ctx context.Context) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := c.start("registry", []string{self, "registry", "--addr", c.RegistryAddr, "--addr", BootRegistryAddr, "--dir", c.path("registry")}); err != nil {
		return err
	}
	for _, a := range []string{c.RegistryAddr, BootRegistryAddr} {
		if err := c.waitHTTP(ctx, "registry", "http://"+a+"/v2/", nil); err != nil {
			return err
		}
	}
	return nil
}

// ImageFile is one file of an image layer (the release's builder builds
// the e2e images too).
type ImageFile = release.File

// Image is an image the cluster's pods pull, under its usual name.
type Image struct {
	Ref        string // e.g. registry.k8s.io/pause:3.10
	Files      []ImageFile
	Entrypoint []string
}

// PushImages builds each image (or takes it from the cache when its inputs
// did not change) and pushes it to the local registry under its usual
// repository path, where containerd's mirror configuration finds it. It
// returns the digest of each image by reference, so that a workload can be
// pinned to exactly what was just built (a warm bring-up with a rebuilt
// image must roll the pods, which an unchanged tag would not).
func (c *Cluster) PushImages(ctx context.Context, images []Image) (map[string]string, error) {
	digests := map[string]string{}
	for _, im := range images {
		start := time.Now()
		img, err := c.cachedImage(im)
		if err != nil {
			return nil, fmt.Errorf("building %s: %w", im.Ref, err)
		}
		d, err := img.Digest()
		if err != nil {
			return nil, fmt.Errorf("digest of %s: %w", im.Ref, err)
		}
		digests[im.Ref] = d.String()
		ref, err := name.ParseReference(im.Ref)
		if err != nil {
			return nil, err
		}
		// registry.k8s.io/pause:3.10 is served as 127.0.0.1:5001/pause:3.10.
		local, err := name.ParseReference(c.RegistryAddr+"/"+ref.Context().RepositoryStr()+":"+ref.Identifier(), name.Insecure)
		if err != nil {
			return nil, err
		}
		if err := remote.Write(local, img, remote.WithContext(ctx)); err != nil {
			return nil, fmt.Errorf("pushing %s: %w", im.Ref, err)
		}
		fmt.Printf("  image %s (%.1fs)\n", im.Ref, time.Since(start).Seconds())
	}
	return digests, nil
}

// cachedImage keeps built images as OCI layouts in CacheDir, keyed by a
// hash of the inputs, so a warm bring-up pushes without re-compressing.
func (c *Cluster) cachedImage(im Image) (v1.Image, error) {
	key, err := inputsKey(im)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(c.CacheDir(), "images", key)
	if p, err := layout.FromPath(dir); err == nil {
		if idx, err := p.ImageIndex(); err == nil {
			if m, err := idx.IndexManifest(); err == nil && len(m.Manifests) == 1 {
				return p.Image(m.Manifests[0].Digest)
			}
		}
	}
	img, err := release.BuildImage(im.Files, im.Entrypoint, "amd64")
	if err != nil {
		return nil, err
	}
	_ = os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return nil, err
	}
	return img, p.AppendImage(img)
}

// CacheDir survives Down, so that a warm Up skips image builds.
func (c *Cluster) CacheDir() string { return c.StateDir + "-cache" }

func inputsKey(im Image) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%q\x00", im.Ref, im.Entrypoint)
	for _, f := range im.Files {
		fmt.Fprintf(h, "%s\x00%d\x00%s\x00", f.Path, f.Mode, f.Content)
		if f.Source != "" {
			if f.HashContent {
				if err := hashFile(h, f.Source); err != nil {
					return "", err
				}
				continue
			}
			st, err := os.Stat(f.Source)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(h, "%s\x00%d\x00%d\x00", f.Source, st.Size(), st.ModTime().UnixNano())
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

func hashFile(h io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return err
	}
	fmt.Fprintf(h, "%s\x00sha256:%x\x00", path, sum.Sum(nil))
	return nil
}

// WriteLayouts writes each image (from the cache when its inputs did not
// change) as an OCI image layout in dir/<repository base name>, e.g.
// dir/kubefarm-pxe, with its reference in the index's
// org.opencontainers.image.ref.name annotation, for skopeo, crane or
// `ctr images import` to take from there.
func (c *Cluster) WriteLayouts(dir string, images []Image) error {
	for _, im := range images {
		img, err := c.cachedImage(im)
		if err != nil {
			return fmt.Errorf("building %s: %w", im.Ref, err)
		}
		ref, err := name.ParseReference(im.Ref)
		if err != nil {
			return err
		}
		out := filepath.Join(dir, filepath.Base(ref.Context().RepositoryStr()))
		if err := os.RemoveAll(out); err != nil {
			return err
		}
		p, err := layout.Write(out, empty.Index)
		if err != nil {
			return err
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": im.Ref,
		})); err != nil {
			return fmt.Errorf("writing %s: %w", out, err)
		}
		d, err := img.Digest()
		if err != nil {
			return err
		}
		fmt.Printf("  %s %s -> %s\n", im.Ref, d, out)
	}
	return nil
}

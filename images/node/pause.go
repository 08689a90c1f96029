package nodeimage

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// PauseImageRef is the sandbox image containerd is configured with in the
// node image, the name the e2e cluster gives the same image.
const PauseImageRef = "registry.k8s.io/pause:3.10"

// WritePauseImage writes a one-layer image holding binary as /pause (its
// entrypoint) as a docker-archive tarball tagged ref, which
// `ctr -n k8s.io images import` loads. Every time in it is mtime, so the
// tarball depends only on the binary. arch is the binary's GOARCH: the
// kubelet's sandbox must match its node's platform, or containerd refuses
// to run it.
func WritePauseImage(w io.Writer, ref, binary, arch string, mtime int64) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	t := time.Unix(mtime, 0).UTC()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(data)), ModTime: t, Format: tar.FormatPAX}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", arch
	cfg.Created = v1.Time{Time: t}
	cfg.Config.Entrypoint = []string{"/pause"}
	cfg.History = nil
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return err
	}
	return tarball.Write(tag, img, w)
}

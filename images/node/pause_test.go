package nodeimage_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	nodeimage "github.com/kubefarm/kubefarm/images/node"
)

// TestPauseImagePlatform: the preloaded sandbox image says the platform of
// the binary it carries (containerd on an arm64 node will not start an
// amd64 sandbox), and the same inputs give the same bytes.
func TestPauseImagePlatform(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(bin, []byte("\x7fELF not really"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(arch string) []byte {
		var buf bytes.Buffer
		if err := nodeimage.WritePauseImage(&buf, nodeimage.PauseImageRef, bin, arch, 1735689600); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	for _, arch := range []string{"amd64", "arm64"} {
		data := write(arch)
		if !bytes.Equal(data, write(arch)) {
			t.Errorf("%s: two writes differ", arch)
		}
		tag, _ := name.NewTag(nodeimage.PauseImageRef)
		img, err := tarball.Image(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }, &tag)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.OS != "linux" || cfg.Architecture != arch {
			t.Errorf("written for %s, the image says %s/%s", arch, cfg.OS, cfg.Architecture)
		}
	}
}

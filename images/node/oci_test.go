package nodeimage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	nodeimage "github.com/kubefarm/kubefarm/images/node"
	"github.com/kubefarm/kubefarm/images/node/cni"
	"github.com/kubefarm/kubefarm/internal/fetchguard"
	"github.com/kubefarm/kubefarm/pxe/httpboot"
)

// imageDir writes a small image folder whose manifest matches its files.
func imageDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	m := nodeimage.Manifest{SchemaVersion: 1, Artifacts: map[string]nodeimage.File{}}
	m.Kubelet.Version = "v1.34.4"
	m.Kernel.Release = "6.1.0-56-amd64"
	m.CNI = cni.Record{Conflist: "/" + cni.ConflistPath, ConflistSHA256: strings.Repeat("c", 64), ChainSHA256: strings.Repeat("d", 64)}
	for _, a := range nodeimage.Artifacts {
		p := filepath.Join(dir, a)
		if err := os.WriteFile(p, []byte("the "+a+" bytes"), 0o644); err != nil {
			t.Fatal(err)
		}
		s, n, err := cni.FileSHA256(p)
		if err != nil {
			t.Fatal(err)
		}
		m.Artifacts[a] = nodeimage.File{SHA256: s, Size: n}
	}
	if err := nodeimage.WriteManifest(dir, &m); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPushThenServe pushes an image folder to a real (in-process) OCI
// registry and fetches each artifact back the way kubefarm-pxe does, from
// the repository the BootImage names, by the digest it names.
func TestPushThenServe(t *testing.T) {
	dir := imageDir(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	repo := u.Host + "/kubefarm/node"

	a, err := nodeimage.NewOCIArtifact(dir)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := a.Push(context.Background(), repo, "v1", []name.Option{name.Insecure})
	if err != nil {
		t.Fatal(err)
	}
	// Same folder, same manifest bytes: the push is reproducible.
	again, err := nodeimage.NewOCIArtifact(dir)
	if err != nil || !bytes.Equal(again.Raw, a.Raw) {
		t.Fatalf("a second description differs: %v", err)
	}

	// The registry holds the manifest under the tag with our media types.
	tag, _ := name.NewTag(repo+":v1", name.Insecure)
	desc, err := remote.Get(tag)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest.String() != ref.DigestStr() {
		t.Fatalf("tag points at %s, push returned %s", desc.Digest, ref.DigestStr())
	}
	var om struct {
		ArtifactType string `json:"artifactType"`
		Config       struct {
			MediaType string `json:"mediaType"`
		} `json:"config"`
		Layers []struct {
			MediaType string `json:"mediaType"`
			Digest    string `json:"digest"`
		} `json:"layers"`
	}
	if err := json.Unmarshal(desc.Manifest, &om); err != nil {
		t.Fatal(err)
	}
	if om.ArtifactType != nodeimage.ArtifactType || om.Config.MediaType != string(nodeimage.ManifestMediaType) || len(om.Layers) != 3 {
		t.Fatalf("manifest: %s", desc.Manifest)
	}

	bi := a.BootImage("node-test", repo)
	if bi.Spec.KubeletVersion != "v1.34.4" || bi.Spec.CNI.ConflistDigest != "sha256:"+strings.Repeat("c", 64) {
		t.Fatalf("BootImage spec: %+v", bi.Spec)
	}
	// The registry listens on 127.0.0.1, which the store refuses unless allowed.
	guard := fetchguard.New(fetchguard.Options{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	store, err := httpboot.NewStore(httpboot.StoreConfig{Dir: t.TempDir(), NameOptions: []name.Option{name.Insecure}, Guard: guard})
	if err != nil {
		t.Fatal(err)
	}
	for i, art := range []string{nodeimage.Vmlinuz, nodeimage.Initrd, nodeimage.Rootfs} {
		want := bi.Spec.Kernel
		switch i {
		case 1:
			want = bi.Spec.Initrd
		case 2:
			want = bi.Spec.Rootfs
		}
		if om.Layers[i].Digest != want.Digest {
			t.Errorf("layer %d is %s, the BootImage names %s", i, om.Layers[i].Digest, want.Digest)
		}
		if err := store.Ensure(context.Background(), want, bi.Spec.Repository); err != nil {
			t.Fatalf("kubefarm-pxe's store fetching %s: %v", art, err)
		}
		f, err := store.Open(want.Digest)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(f)
		f.Close()
		if string(got) != "the "+art+" bytes" {
			t.Errorf("%s came back as %q", art, got)
		}
	}
}

// TestOCIArtifactRefusesAChangedFile: a folder whose file no longer matches
// its manifest is never pushed.
func TestOCIArtifactRefusesAChangedFile(t *testing.T) {
	dir := imageDir(t)
	if err := os.WriteFile(filepath.Join(dir, nodeimage.Initrd), []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := nodeimage.NewOCIArtifact(dir); err == nil || !strings.Contains(err.Error(), "initrd") {
		t.Fatalf("want an error naming the initrd, got %v", err)
	}
}

// TestBootImageArchitecture: the BootImage of an image says the
// architecture its manifest was built for, so that kubefarm-pxe's script
// check sends arm64 machines only arm64 kernels; a manifest from before
// arm64 images existed stays amd64.
func TestBootImageArchitecture(t *testing.T) {
	for _, tc := range []struct{ manifest, want string }{{"", "amd64"}, {"amd64", "amd64"}, {"arm64", "arm64"}} {
		dir := imageDir(t)
		m, err := nodeimage.ReadManifest(dir)
		if err != nil {
			t.Fatal(err)
		}
		m.Architecture = tc.manifest
		if err := nodeimage.WriteManifest(dir, m); err != nil {
			t.Fatal(err)
		}
		a, err := nodeimage.NewOCIArtifact(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := a.BootImage("node", "registry.example/node").Spec.Architecture; got != tc.want {
			t.Errorf("manifest architecture %q: BootImage says %q, want %q", tc.manifest, got, tc.want)
		}
	}
}

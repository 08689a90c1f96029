package release

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"debug/pe"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	helmregistry "helm.sh/helm/v3/pkg/registry"

	"github.com/kubefarm/kubefarm/pxe/bootfile"
	"github.com/kubefarm/kubefarm/pxe/tftp"
)

// serveRegistry is an OCI registry (go-containerregistry's, with the
// referrers API) on a loopback port of the test's own.
func serveRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.WithReferrersSupport(true), registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestRelease releases the checkout twice, as `make release` does, and checks
// what a user pulls: one index per image with an amd64 and an arm64 image
// whose binaries are for that machine, an SBOM attached to each that names
// the modules linked, charts whose version, appVersion and default images
// are the release's, and the same digests both times.
func TestRelease(t *testing.T) {
	created := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	var manifests [2]*Manifest
	reg := serveRegistry(t)
	// A stand-in for make ipxe-arm64's build, which the test does not run.
	arm := fakeEFI(t, pe.IMAGE_FILE_MACHINE_ARM64, "kubefarm release test: the arm64 iPXE\n")
	for i := range manifests {
		o := Options{RepoRoot: repoRoot(t), Version: "0.3.0", ImageRepo: reg + "/kubefarm", Arches: []string{"amd64", "arm64"},
			OutDir: t.TempDir(), Created: created, Commit: "test", IPXEARM64: arm}
		m, err := Run(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		onDisk, err := os.ReadFile(filepath.Join(o.OutDir, "release.json"))
		if err != nil {
			t.Fatal(err)
		}
		var read Manifest
		if err := json.Unmarshal(onDisk, &read); err != nil {
			t.Fatalf("release.json: %v", err)
		}
		manifests[i] = &read
		checkImages(t, o, m)
		checkCharts(t, o, m)
	}
	// Reproducible: the second run built every binary, image, SBOM and
	// chart again (into a folder of its own) and pushed the same bytes.
	a, b := digests(manifests[0]), digests(manifests[1])
	if len(a) != 3*3+2 {
		t.Fatalf("digests: %v", a)
	}
	for k, v := range a {
		if b[k] != v {
			t.Errorf("%s: %s in the first release, %s in the second", k, v, b[k])
		}
	}
}

// TestReleaseNeedsARM64IPXE: a release whose arm64 iPXE is not built
// fails at once, before it builds or pushes anything.
func TestReleaseNeedsARM64IPXE(t *testing.T) {
	o := Options{RepoRoot: repoRoot(t), Version: "0.3.0", ImageRepo: "127.0.0.1:9/kubefarm", Arches: []string{"amd64", "arm64"},
		OutDir: t.TempDir(), Created: time.Unix(1, 0), IPXEARM64: filepath.Join(t.TempDir(), "ipxe-arm64.efi")}
	_, err := Run(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "make ipxe-arm64") {
		t.Fatalf("got %v, want an error naming make ipxe-arm64", err)
	}
	if built, _ := os.ReadDir(o.OutDir); len(built) != 0 {
		t.Errorf("the release wrote %d entries into its folder before it failed", len(built))
	}
}

func digests(m *Manifest) map[string]string {
	out := map[string]string{}
	for _, im := range m.Images {
		out[im.Name] = im.Digest
		for _, p := range im.Platforms {
			out[im.Name+" "+p.Platform] = p.Digest
			if p.SBOMDigest == "" || p.SBOMSHA256 == "" {
				out[im.Name+" "+p.Platform+" sbom"] = "missing"
			}
		}
	}
	for _, c := range m.Charts {
		out[c.Name+" chart"] = c.Digest
	}
	return out
}

var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

func checkImages(t *testing.T, o Options, m *Manifest) {
	t.Helper()
	if len(m.Images) != 3 {
		t.Fatalf("images: %+v", m.Images)
	}
	for _, im := range m.Images {
		ref, err := name.ParseReference(im.Ref)
		if err != nil {
			t.Fatal(err)
		}
		if want := o.ImageRepo + "/" + im.Name + ":0.3.0"; im.Ref != want {
			t.Errorf("ref %s, want %s", im.Ref, want)
		}
		idx, err := remote.Index(ref)
		if err != nil {
			t.Fatalf("%s: %v", im.Ref, err)
		}
		if d, _ := idx.Digest(); d.String() != im.Digest {
			t.Errorf("%s: the registry has %s, release.json says %s", im.Ref, d, im.Digest)
		}
		idxm, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(idxm.Manifests) != 2 {
			t.Fatalf("%s: %d manifests, want amd64 and arm64", im.Ref, len(idxm.Manifests))
		}
		for i, desc := range idxm.Manifests {
			arch := o.Arches[i]
			if desc.Platform == nil || desc.Platform.OS != "linux" || desc.Platform.Architecture != arch {
				t.Errorf("%s: manifest %d is for %+v, want linux/%s", im.Ref, i, desc.Platform, arch)
			}
			if p := im.Platforms[i]; p.Platform != "linux/"+arch || p.Digest != desc.Digest.String() {
				t.Errorf("%s: release.json's platform %+v, the index's %s %s", im.Ref, p, arch, desc.Digest)
			}
			img, err := idx.Image(desc.Digest)
			if err != nil {
				t.Fatal(err)
			}
			checkBinary(t, im.Name, arch, img)
			if im.Name == "kubefarm-pxe" {
				checkIPXE(t, o, arch, img)
			}
			checkSBOM(t, o, im.Name, ref.Context().Digest(desc.Digest.String()), im.Platforms[i])
		}
	}
}

// checkBinary reads the image's entrypoint from its layer and checks that
// it is an ELF executable for arch, as its config says.
func checkBinary(t *testing.T, image, arch string, img v1.Image) {
	t.Helper()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Architecture != arch || cfg.OS != "linux" || len(cfg.Config.Entrypoint) != 1 {
		t.Fatalf("%s %s: config %s/%s entrypoint %v", image, arch, cfg.OS, cfg.Architecture, cfg.Config.Entrypoint)
	}
	if !cfg.Created.IsZero() {
		t.Errorf("%s %s: created %v: a timestamp makes digests differ", image, arch, cfg.Created)
	}
	entry := strings.TrimPrefix(cfg.Config.Entrypoint[0], "/")
	rc := mutate.Extract(img)
	defer rc.Close()
	data, err := fileFromTar(rc, entry)
	if err != nil {
		t.Fatalf("%s %s: %s: %v", image, arch, entry, err)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s %s: %s is not ELF: %v", image, arch, entry, err)
	}
	if f.Machine != elfMachine[arch] {
		t.Errorf("%s %s: %s is for %v", image, arch, entry, f.Machine)
	}
}

// checkIPXE: each architecture's kubefarm-pxe image carries, where
// kubefarm-pxe serves TFTP from, every binary it serves: Debian's x86 ones
// from the build machine and the arm64 one the release was given.
func checkIPXE(t *testing.T, o Options, arch string, img v1.Image) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	got := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if dir, name := path.Split(strings.TrimPrefix(h.Name, "./")); dir == strings.TrimPrefix(IPXEDir, "/")+"/" && name != "" {
			if got[name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(got) != len(tftp.DefaultFiles) {
		t.Errorf("kubefarm-pxe %s: %d files in %s, want %d (%v)", arch, len(got), IPXEDir, len(tftp.DefaultFiles), tftp.DefaultFiles)
	}
	for _, name := range tftp.DefaultFiles {
		src := filepath.Join(IPXEDir, name)
		if name == bootfile.BinaryUEFIARM64 {
			src = o.IPXEARM64
		}
		want, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[name], want) {
			t.Errorf("kubefarm-pxe %s: %s/%s (%d bytes) is not %s (%d bytes)", arch, IPXEDir, name, len(got[name]), src, len(want))
		}
	}
}

func checkSBOM(t *testing.T, o Options, image string, imgRef name.Digest, p PlatformManifest) {
	t.Helper()
	file, err := os.ReadFile(filepath.Join(o.OutDir, p.SBOM))
	if err != nil {
		t.Fatal(err)
	}
	if got := "sha256:" + sha256Hex(file); got != p.SBOMSHA256 {
		t.Errorf("%s: %s is %s, release.json says %s", image, p.SBOM, got, p.SBOMSHA256)
	}
	refs, err := remote.Referrers(imgRef)
	if err != nil {
		t.Fatalf("referrers of %s: %v", imgRef, err)
	}
	rm, err := refs.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(rm.Manifests) != 1 || rm.Manifests[0].Digest.String() != p.SBOMDigest || rm.Manifests[0].ArtifactType != SPDXMediaType {
		t.Fatalf("referrers of %s: %+v, want the SBOM %s", imgRef, rm.Manifests, p.SBOMDigest)
	}
	art, err := remote.Image(imgRef.Context().Digest(p.SBOMDigest))
	if err != nil {
		t.Fatal(err)
	}
	layers, err := art.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("SBOM artifact layers: %v %v", layers, err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(pushed, file) {
		t.Fatalf("the pushed SBOM differs from %s (%v)", p.SBOM, err)
	}
	var doc spdxDocument
	if err := json.Unmarshal(file, &doc); err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, pkg := range doc.Packages {
		names[pkg.Name] = pkg.VersionInfo
	}
	want := []string{"github.com/kubefarm/kubefarm", "stdlib", image}
	if image == "kubefarm-manager" {
		want = append(want, "sigs.k8s.io/controller-runtime", "kubefarm-etcd")
	}
	if image == "kubefarm-pxe" {
		want = append(want, "github.com/insomniacslk/dhcp", "k8s.io/client-go")
		if len(doc.Files) == 0 {
			t.Errorf("%s: the SBOM lists no iPXE files", image)
		}
	}
	for _, n := range want {
		if _, ok := names[n]; !ok {
			t.Errorf("%s: the SBOM has no package %s", image, n)
		}
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.CreationInfo.Created != o.Created.Format(time.RFC3339) {
		t.Errorf("%s: SBOM header %s %s", image, doc.SPDXVersion, doc.CreationInfo.Created)
	}
}

// checkCharts pulls each chart as Helm does and renders the operator's:
// its Deployment must run the release's image, tagged with the version.
func checkCharts(t *testing.T, o Options, m *Manifest) {
	t.Helper()
	client, err := helmregistry.NewClient(helmregistry.ClientOptPlainHTTP(), helmregistry.ClientOptWriter(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Charts) != 2 {
		t.Fatalf("charts: %+v", m.Charts)
	}
	for _, c := range m.Charts {
		if want := "oci://" + o.ImageRepo + "/charts/" + c.Name; c.Ref != want {
			t.Errorf("chart ref %s, want %s", c.Ref, want)
		}
		res, err := client.Pull(strings.TrimPrefix(c.Ref, "oci://") + ":" + c.Version)
		if err != nil {
			t.Fatalf("pulling %s: %v", c.Ref, err)
		}
		if res.Manifest.Digest != c.Digest {
			t.Errorf("%s: pulled %s, release.json says %s", c.Ref, res.Manifest.Digest, c.Digest)
		}
		ch, err := loader.LoadArchive(bytes.NewReader(res.Chart.Data))
		if err != nil {
			t.Fatal(err)
		}
		if ch.Metadata.Version != "0.3.0" || ch.Metadata.AppVersion != "0.3.0" {
			t.Errorf("%s: version %s appVersion %s", c.Name, ch.Metadata.Version, ch.Metadata.AppVersion)
		}
		if c.Name != "kubefarm-operator" {
			continue
		}
		install := action.NewInstall(&action.Configuration{})
		install.DryRun, install.ClientOnly, install.ReleaseName, install.Namespace = true, true, "kubefarm", "kubefarm-system"
		install.KubeVersion = &chartutil.KubeVersion{Version: "v1.34.0", Major: "1", Minor: "34"}
		rel, err := install.Run(ch, map[string]any{"pxe": map[string]any{"enabled": true}})
		if err != nil {
			t.Fatalf("rendering %s: %v", c.Name, err)
		}
		for _, img := range []string{"kubefarm-manager", "kubefarm-pxe"} {
			if want := `image: "` + o.ImageRepo + "/" + img + `:0.3.0"`; !strings.Contains(rel.Manifest, want) {
				t.Errorf("%s renders no %q", c.Name, want)
			}
		}
	}
}

func fileFromTar(r io.Reader, path string) ([]byte, error) {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err != nil {
			return nil, err
		}
		if strings.TrimPrefix(h.Name, "./") == path {
			return io.ReadAll(tr)
		}
	}
}

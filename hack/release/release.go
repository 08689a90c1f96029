package release

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Options say what to release and where.
type Options struct {
	RepoRoot string // the checkout the binaries and charts come from
	Version  string // x.y.z, the images' tag and the charts' version and appVersion
	// ImageRepo is where the images go, as <ImageRepo>/kubefarm-manager;
	// the charts' default repositories point there.
	ImageRepo string
	// ChartRepo is where the charts go, as oci://<ChartRepo>/kubefarm;
	// empty means <ImageRepo>/charts.
	ChartRepo string
	Arches    []string  // linux architectures, e.g. amd64 and arm64
	OutDir    string    // binaries, SBOMs, chart archives and release.json
	Created   time.Time // the source date (the commit's time): every timestamp the artifacts carry
	Commit    string    // recorded in the manifest
	// IPXEARM64 is the arm64 UEFI iPXE the kubefarm-pxe images carry
	// beside Debian's x86 ones (make ipxe-arm64: IPXEARM64Build); required.
	IPXEARM64 string
}

// ChartDirs are the charts a release packages, relative to the checkout.
var ChartDirs = []string{"charts/kubefarm-operator", "charts/kubefarm"}

var versionRE = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// Validate names the option that is wrong.
func (o Options) Validate() error {
	if !versionRE.MatchString(o.Version) {
		return fmt.Errorf("version %q: want x.y.z (semantic version, no leading v), e.g. 0.2.0", o.Version)
	}
	if host := strings.SplitN(o.ImageRepo, "/", 2)[0]; !strings.ContainsAny(host, ".:") && host != "localhost" {
		return fmt.Errorf("image repository %q: want <registry host>/<path>, e.g. ghcr.io/kubefarm", o.ImageRepo)
	}
	if _, err := name.NewRepository(o.ImageRepo + "/kubefarm-manager"); err != nil {
		return fmt.Errorf("image repository %q: %w", o.ImageRepo, err)
	}
	if _, err := name.NewRepository(o.chartRepo() + "/kubefarm"); err != nil {
		return fmt.Errorf("chart repository %q: %w", o.chartRepo(), err)
	}
	if len(o.Arches) == 0 {
		return fmt.Errorf("no architectures")
	}
	for _, a := range o.Arches {
		if a != "amd64" && a != "arm64" {
			return fmt.Errorf("architecture %q: kubefarm releases amd64 and arm64", a)
		}
	}
	if o.Created.IsZero() {
		return fmt.Errorf("no source date (the commit's time, SOURCE_DATE_EPOCH)")
	}
	if o.IPXEARM64 == "" {
		return fmt.Errorf("no arm64 iPXE (make ipxe-arm64 builds %s): a release's kubefarm-pxe must serve arm64 machines", IPXEARM64Build)
	}
	return nil
}

// ipxe is where the release's kubefarm-pxe images take their iPXE binaries.
func (o Options) ipxe() IPXESources {
	return IPXESources{ARM64: o.IPXEARM64, RequireARM64: true}
}

func (o Options) chartRepo() string {
	if o.ChartRepo != "" {
		return o.ChartRepo
	}
	return o.ImageRepo + "/charts"
}

// Manifest is release.json: what a release pushed, by digest.
type Manifest struct {
	Version    string          `json:"version"`
	Commit     string          `json:"commit,omitempty"`
	SourceDate string          `json:"sourceDate"`
	Images     []ImageManifest `json:"images"`
	Charts     []ChartManifest `json:"charts"`
}

// ImageManifest is one multi-arch image: its index and each platform's
// image with the SBOM attached to it.
type ImageManifest struct {
	Name      string             `json:"name"`
	Ref       string             `json:"ref"`    // repository:version
	Digest    string             `json:"digest"` // the index's
	Platforms []PlatformManifest `json:"platforms"`
}

// PlatformManifest is one architecture's image and its SBOM.
type PlatformManifest struct {
	Platform   string `json:"platform"` // linux/amd64
	Digest     string `json:"digest"`
	SBOM       string `json:"sbom"`       // file in the release folder
	SBOMSHA256 string `json:"sbomSHA256"` // of that file
	// SBOMDigest is the artifact pushed with the image as its subject
	// (OCI referrers, or the sha256-<digest> tag where a registry has no
	// referrers API).
	SBOMDigest string `json:"sbomDigest"`
}

// ChartManifest is one chart pushed as an OCI artifact.
type ChartManifest struct {
	Name    string `json:"name"`
	Ref     string `json:"ref"` // oci://repository/name, for helm install --version
	Version string `json:"version"`
	Digest  string `json:"digest"`
	Archive string `json:"archive"` // file in the release folder
}

// Run builds and pushes everything and writes release.json into OutDir.
func Run(ctx context.Context, o Options) (*Manifest, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	// The iPXE binaries before minutes of builds: a release without them
	// fails at once.
	if _, err := IPXEFiles(o.ipxe()); err != nil {
		return nil, err
	}
	m := &Manifest{Version: o.Version, Commit: o.Commit, SourceDate: o.Created.UTC().Format(time.RFC3339)}
	binDirs := map[string]string{}
	for _, arch := range o.Arches {
		binDirs[arch] = filepath.Join(o.OutDir, "bin", arch)
		if _, err := BuildBinaries(o.RepoRoot, binDirs[arch], arch, Binaries); err != nil {
			return nil, err
		}
	}
	for _, spec := range ProjectImages(o.ipxe()) {
		im, err := o.releaseImage(ctx, spec, binDirs)
		if err != nil {
			return nil, err
		}
		m.Images = append(m.Images, *im)
	}
	for _, dir := range ChartDirs {
		ch, err := o.releaseChart(filepath.Join(o.RepoRoot, dir))
		if err != nil {
			return nil, err
		}
		m.Charts = append(m.Charts, *ch)
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return m, os.WriteFile(filepath.Join(o.OutDir, "release.json"), append(data, '\n'), 0o644)
}

// releaseImage builds spec for every architecture, pushes each image and
// its SBOM by digest, then the index under the version's tag.
func (o Options) releaseImage(ctx context.Context, spec ImageSpec, binDirs map[string]string) (*ImageManifest, error) {
	repo, err := name.NewRepository(o.ImageRepo + "/" + spec.Name)
	if err != nil {
		return nil, err
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	out := &ImageManifest{Name: spec.Name, Ref: repo.Tag(o.Version).String()}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range o.Arches {
		files, err := spec.Files(binDirs[arch])
		if err != nil {
			return nil, fmt.Errorf("%s for linux/%s: %w", spec.Name, arch, err)
		}
		img, err := BuildImage(files, spec.Entrypoint, arch)
		if err != nil {
			return nil, fmt.Errorf("%s for linux/%s: %w", spec.Name, arch, err)
		}
		img = mutate.MediaType(img, types.OCIManifestSchema1)
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
		p, err := o.pushPlatform(repo, spec.Name, arch, img, files, opts)
		if err != nil {
			return nil, err
		}
		out.Platforms = append(out.Platforms, *p)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: arch},
		}})
	}
	d, err := idx.Digest()
	if err != nil {
		return nil, err
	}
	if err := remote.WriteIndex(repo.Tag(o.Version), idx, opts...); err != nil {
		return nil, fmt.Errorf("pushing %s: %w", out.Ref, err)
	}
	out.Digest = d.String()
	fmt.Printf("  image %s@%s\n", out.Ref, out.Digest)
	return out, nil
}

// pushPlatform pushes one architecture's image and its SBOM, whose file
// it also writes into the release folder.
func (o Options) pushPlatform(repo name.Repository, image, arch string, img v1.Image, files []File, opts []remote.Option) (*PlatformManifest, error) {
	d, err := img.Digest()
	if err != nil {
		return nil, err
	}
	if err := remote.Write(repo.Digest(d.String()), img, opts...); err != nil {
		return nil, fmt.Errorf("pushing %s for linux/%s: %w", image, arch, err)
	}
	sbom, err := SBOM(image, o.Version, arch, files, o.Created)
	if err != nil {
		return nil, fmt.Errorf("SBOM of %s for linux/%s: %w", image, arch, err)
	}
	file := filepath.Join("sbom", fmt.Sprintf("%s-linux-%s.spdx.json", image, arch))
	if err := writeFile(filepath.Join(o.OutDir, file), sbom); err != nil {
		return nil, err
	}
	art, err := sbomArtifact(img, sbom)
	if err != nil {
		return nil, err
	}
	ad, err := art.Digest()
	if err != nil {
		return nil, err
	}
	if err := remote.Write(repo.Digest(ad.String()), art, opts...); err != nil {
		return nil, fmt.Errorf("pushing the SBOM of %s for linux/%s: %w", image, arch, err)
	}
	return &PlatformManifest{Platform: "linux/" + arch, Digest: d.String(), SBOM: file,
		SBOMSHA256: v1.Hash{Algorithm: "sha256", Hex: sha256Hex(sbom)}.String(), SBOMDigest: ad.String()}, nil
}

// sbomArtifact is an OCI artifact holding the SBOM as its one layer, with
// img as its subject, so that `oras discover` or cosign find it from the
// image. Its artifact type is the SPDX media type (the config's).
func sbomArtifact(img v1.Image, sbom []byte) (v1.Image, error) {
	subject, err := descriptorOf(img)
	if err != nil {
		return nil, err
	}
	art, err := mutate.AppendLayers(empty.Image, static.NewLayer(sbom, SPDXMediaType))
	if err != nil {
		return nil, err
	}
	art = mutate.MediaType(art, types.OCIManifestSchema1)
	art = mutate.ConfigMediaType(art, SPDXMediaType)
	return mutate.Subject(art, *subject).(v1.Image), nil
}

func descriptorOf(img v1.Image) (*v1.Descriptor, error) {
	d, err := img.Digest()
	if err != nil {
		return nil, err
	}
	size, err := img.Size()
	if err != nil {
		return nil, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return nil, err
	}
	return &v1.Descriptor{MediaType: mt, Digest: d, Size: size}, nil
}

func (o Options) releaseChart(dir string) (*ChartManifest, error) {
	c, data, err := PackageChart(dir, o.Version, o.ImageRepo, o.Created)
	if err != nil {
		return nil, err
	}
	file := filepath.Join("charts", fmt.Sprintf("%s-%s.tgz", c.Name(), o.Version))
	if err := writeFile(filepath.Join(o.OutDir, file), data); err != nil {
		return nil, err
	}
	digest, err := PushChart(data, o.chartRepo(), c.Name(), o.Version, o.Created, isLoopback(o.chartRepo()))
	if err != nil {
		return nil, err
	}
	ref := "oci://" + o.chartRepo() + "/" + c.Name()
	fmt.Printf("  chart %s %s@%s\n", ref, o.Version, digest)
	return &ChartManifest{Name: c.Name(), Ref: ref, Version: o.Version, Digest: digest, Archive: file}, nil
}

package nodeimage

// One OCI artifact per node image: the manifest.json is its config blob and
// the three boot files are its layers, each stored exactly as built (no
// compression), so a layer's digest is the file's sha256 — the digest a
// BootImage names and kubefarm-pxe fetches from the repository's blobs.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/images/node/cni"
)

// Media types of the artifact. They are kubefarm's own: no runtime should
// mistake a node image for a container image.
const (
	ArtifactType      = "application/vnd.kubefarm.node-image.v1"
	ManifestMediaType = types.MediaType("application/vnd.kubefarm.node-image.manifest.v1+json")
)

// artifactMediaTypes names each boot file's layer.
var artifactMediaTypes = map[string]types.MediaType{
	Vmlinuz: "application/vnd.kubefarm.node-image.kernel.v1",
	Initrd:  "application/vnd.kubefarm.node-image.initrd.v1",
	Rootfs:  "application/vnd.kubefarm.node-image.rootfs.v1.squashfs",
}

// fileBlob is a file pushed as it is: its digest is its sha256.
type fileBlob struct {
	path   string
	digest v1.Hash
	size   int64
	mt     types.MediaType
}

func (b fileBlob) Digest() (v1.Hash, error)             { return b.digest, nil }
func (b fileBlob) DiffID() (v1.Hash, error)             { return b.digest, nil }
func (b fileBlob) Size() (int64, error)                 { return b.size, nil }
func (b fileBlob) MediaType() (types.MediaType, error)  { return b.mt, nil }
func (b fileBlob) Compressed() (io.ReadCloser, error)   { return os.Open(b.path) }
func (b fileBlob) Uncompressed() (io.ReadCloser, error) { return os.Open(b.path) }

func (b fileBlob) desc(title string) v1.Descriptor {
	return v1.Descriptor{MediaType: b.mt, Size: b.size, Digest: b.digest,
		Annotations: map[string]string{"org.opencontainers.image.title": title}}
}

// rawManifest is a manifest pushed as bytes, with its media type.
type rawManifest []byte

func (m rawManifest) RawManifest() ([]byte, error)        { return m, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// OCIArtifact is a verified image folder as an OCI artifact.
type OCIArtifact struct {
	Manifest *Manifest
	// Blobs: the config (manifest.json) first, then the boot files in the
	// order of Artifacts.
	Blobs []fileBlob
	// Raw is the OCI image manifest; Digest is its sha256.
	Raw    []byte
	Digest v1.Hash
}

// NewOCIArtifact verifies dir (every artifact against manifest.json) and
// describes it as one OCI artifact. Same folder, same bytes: the manifest
// carries no time and its maps marshal sorted.
func NewOCIArtifact(dir string) (*OCIArtifact, error) {
	m, err := Verify(dir)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, ManifestFile)
	cfgSum, cfgSize, err := cni.FileSHA256(cfgPath)
	if err != nil {
		return nil, err
	}
	cfg := fileBlob{path: cfgPath, digest: v1.Hash{Algorithm: "sha256", Hex: cfgSum}, size: cfgSize, mt: ManifestMediaType}
	a := &OCIArtifact{Manifest: m, Blobs: []fileBlob{cfg}}
	om := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  ArtifactType,
		Config:        cfg.desc(ManifestFile),
		Annotations: map[string]string{
			"io.kubefarm.kubelet.version": m.Kubelet.Version,
			"io.kubefarm.kernel.release":  m.Kernel.Release,
			"io.kubefarm.cni.chain":       "sha256:" + m.CNI.ChainSHA256,
		},
	}
	for _, f := range Artifacts {
		b := fileBlob{path: filepath.Join(dir, f), digest: v1.Hash{Algorithm: "sha256", Hex: m.Artifacts[f].SHA256},
			size: m.Artifacts[f].Size, mt: artifactMediaTypes[f]}
		a.Blobs = append(a.Blobs, b)
		om.Layers = append(om.Layers, b.desc(f))
	}
	if a.Raw, err = json.Marshal(om); err != nil {
		return nil, err
	}
	if a.Digest, _, err = v1.SHA256(strings.NewReader(string(a.Raw))); err != nil {
		return nil, err
	}
	return a, nil
}

// Push uploads the artifact's blobs (skipping those the registry has) and
// its manifest to repository, tagged tag when tag is not empty; it returns
// the manifest's digest reference.
func (a *OCIArtifact) Push(ctx context.Context, repository, tag string, nameOpts []name.Option, opts ...remote.Option) (name.Digest, error) {
	repo, err := name.NewRepository(repository, nameOpts...)
	if err != nil {
		return name.Digest{}, fmt.Errorf("repository %q: %w", repository, err)
	}
	opts = append([]remote.Option{remote.WithContext(ctx)}, opts...)
	for _, b := range a.Blobs {
		if err := remote.WriteLayer(repo, b, opts...); err != nil {
			return name.Digest{}, fmt.Errorf("pushing %s: %w", filepath.Base(b.path), err)
		}
	}
	dig := repo.Digest(a.Digest.String())
	var ref name.Reference = dig
	if tag != "" {
		ref = repo.Tag(tag)
	}
	if err := remote.Put(ref, rawManifest(a.Raw), opts...); err != nil {
		return name.Digest{}, fmt.Errorf("pushing the manifest to %s: %w", ref, err)
	}
	return dig, nil
}

// BootImage is the BootImage that serves this artifact from repository:
// every artifact by digest, the kubelet version and the CNI chain.
func (a *OCIArtifact) BootImage(objName, repository string) *kubefarmv1.BootImage {
	m := a.Manifest
	art := func(f string) kubefarmv1.Artifact {
		return kubefarmv1.Artifact{Digest: "sha256:" + m.Artifacts[f].SHA256}
	}
	plugins := m.CNI.ConflistPlugins
	if len(plugins) == 0 {
		plugins = cni.ConflistPlugins
	}
	return &kubefarmv1.BootImage{
		TypeMeta: metav1.TypeMeta{APIVersion: kubefarmv1.GroupVersion.String(), Kind: "BootImage"},
		ObjectMeta: metav1.ObjectMeta{Name: objName, Annotations: map[string]string{
			"kubefarm.io/oci-manifest": a.Digest.String(),
		}},
		Spec: kubefarmv1.BootImageSpec{
			Repository:     repository,
			Architecture:   m.Arch(),
			Kernel:         art(Vmlinuz),
			Initrd:         art(Initrd),
			Rootfs:         art(Rootfs),
			KubeletVersion: m.Kubelet.Version,
			CNI: kubefarmv1.CNIChain{
				Plugins:        plugins,
				ConflistDigest: "sha256:" + m.CNI.ConflistSHA256,
			},
		},
	}
}

package release

import (
	"crypto/sha1" // SPDX 2.3 requires a file's SHA1 beside its SHA256
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// SPDXMediaType is the media type of the SBOM artifacts pushed beside each
// image (and of the files written into the release folder).
const SPDXMediaType = "application/spdx+json"

// spdxDocument is the part of SPDX 2.3 (JSON) an image's SBOM uses.
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreation       `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Files             []spdxFile         `json:"files,omitempty"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string         `json:"name"`
	SPDXID           string         `json:"SPDXID"`
	VersionInfo      string         `json:"versionInfo,omitempty"`
	DownloadLocation string         `json:"downloadLocation"`
	FilesAnalyzed    bool           `json:"filesAnalyzed"`
	Checksums        []spdxChecksum `json:"checksums,omitempty"`
	ExternalRefs     []spdxRef      `json:"externalRefs,omitempty"`
	Purpose          string         `json:"primaryPackagePurpose,omitempty"`
}

type spdxFile struct {
	FileName  string         `json:"fileName"`
	SPDXID    string         `json:"SPDXID"`
	Checksums []spdxChecksum `json:"checksums"`
}

type spdxChecksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// SBOM is the SPDX 2.3 document of one image for one architecture: each Go
// binary it carries (with the modules and the Go toolchain its build info
// names, read from the binary itself, so it lists what was linked, not what
// go.mod allows) and each other file by checksum. created is the release's
// source date, so the same inputs give the same bytes.
func SBOM(image, version, arch string, files []File, created time.Time) ([]byte, error) {
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:         fmt.Sprintf("%s-%s-linux-%s", image, version, arch),
		CreationInfo: spdxCreation{Created: created.UTC().Format(time.RFC3339), Creators: []string{"Tool: kubefarm-release"}},
	}
	ids := map[string]bool{}
	content := sha256.New()
	for i, f := range files {
		sha1sum, sha256sum, err := fileSums(f)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(content, "%s %s\n", f.Path, sha256sum)
		sums := []spdxChecksum{{"SHA1", sha1sum}, {"SHA256", sha256sum}}
		info, err := goBuildInfo(f)
		if err != nil {
			return nil, err
		}
		if info == nil {
			id := fmt.Sprintf("SPDXRef-File-%d", i)
			doc.Files = append(doc.Files, spdxFile{FileName: "." + f.Path, SPDXID: id, Checksums: sums})
			doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", id})
			continue
		}
		binID := "SPDXRef-Binary-" + spdxIDPart(path.Base(f.Path))
		doc.Packages = append(doc.Packages, spdxPackage{
			Name: path.Base(f.Path), SPDXID: binID, VersionInfo: version, DownloadLocation: "NOASSERTION",
			Checksums: sums, Purpose: "APPLICATION",
		})
		doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", binID})
		for _, m := range modulesOf(info) {
			id := "SPDXRef-Package-" + spdxIDPart(m.path+"-"+m.version)
			if !ids[id] {
				ids[id] = true
				doc.Packages = append(doc.Packages, spdxPackage{
					Name: m.path, SPDXID: id, VersionInfo: m.version, DownloadLocation: "NOASSERTION", Purpose: "LIBRARY",
					ExternalRefs: []spdxRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + m.path + "@" + m.version}},
				})
			}
			doc.Relationships = append(doc.Relationships, spdxRelationship{binID, "DEPENDS_ON", id})
		}
	}
	// Unique per content, as SPDX asks of a namespace, and stable for it.
	doc.DocumentNamespace = fmt.Sprintf("https://github.com/kubefarm/kubefarm/spdx/%s/%s/linux-%s/%s",
		image, version, arch, hex.EncodeToString(content.Sum(nil))[:16])
	return json.MarshalIndent(doc, "", "  ")
}

type module struct{ path, version string }

// modulesOf are the toolchain, the main module and every linked module (a
// replaced module under its replacement), sorted.
func modulesOf(info *buildinfo.BuildInfo) []module {
	mods := []module{{"stdlib", strings.TrimPrefix(info.GoVersion, "go")}}
	main := info.Main.Version
	if main == "" || main == "(devel)" {
		main = "(devel)"
	}
	mods = append(mods, module{info.Main.Path, main})
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		mods = append(mods, module{d.Path, d.Version})
	}
	sort.Slice(mods[2:], func(i, j int) bool { return mods[2+i].path < mods[2+j].path })
	return mods
}

// goBuildInfo is a Go binary's build info, nil for any other file.
func goBuildInfo(f File) (*buildinfo.BuildInfo, error) {
	if f.Source == "" || f.Mode&0o111 == 0 {
		return nil, nil
	}
	info, err := buildinfo.ReadFile(f.Source)
	if err != nil {
		return nil, nil // not a Go binary (a script or a C program)
	}
	return info, nil
}

func fileSums(f File) (string, string, error) {
	h1, h256 := sha1.New(), sha256.New()
	w := io.MultiWriter(h1, h256)
	if f.Source == "" {
		_, _ = io.WriteString(w, f.Content)
	} else {
		src, err := os.Open(f.Source)
		if err != nil {
			return "", "", err
		}
		defer src.Close()
		if _, err := io.Copy(w, src); err != nil {
			return "", "", err
		}
	}
	return hex.EncodeToString(h1.Sum(nil)), hex.EncodeToString(h256.Sum(nil)), nil
}

// spdxIDPart keeps what an SPDX identifier allows (letters, digits, '.'
// and '-').
func spdxIDPart(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, s)
}

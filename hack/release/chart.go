package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/registry"
)

// DefaultImageRepository is where the charts in the checkout say the
// project's images are; a release points them at its own registry.
const DefaultImageRepository = "ghcr.io/kubefarm"

// PackageChart is the chart in dir as a chart archive for a release:
// version and appVersion set to version (the images' tags default to the
// appVersion), every image repository under DefaultImageRepository moved
// to imageRepo, and the archive's bytes fixed by the release's source date
// (Helm stamps each entry with the current time, so two packagings of the
// same chart would differ).
func PackageChart(dir, version, imageRepo string, created time.Time) (*chart.Chart, []byte, error) {
	c, err := loader.Load(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("loading chart %s: %w", dir, err)
	}
	c.Metadata.Version, c.Metadata.AppVersion = version, version
	for _, f := range c.Raw {
		if f.Name == chartutil.ValuesfileName {
			f.Data = []byte(strings.ReplaceAll(string(f.Data), "repository: "+DefaultImageRepository+"/", "repository: "+imageRepo+"/"))
		}
	}
	if err := c.Validate(); err != nil {
		return nil, nil, fmt.Errorf("chart %s: %w", dir, err)
	}
	tmp, err := os.MkdirTemp("", "kubefarm-chart-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(tmp)
	file, err := chartutil.Save(c, tmp)
	if err != nil {
		return nil, nil, fmt.Errorf("packaging chart %s: %w", dir, err)
	}
	saved, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, err
	}
	data, err := fixArchiveTimes(saved, created)
	if err != nil {
		return nil, nil, fmt.Errorf("chart %s: %w", filepath.Base(file), err)
	}
	return c, data, nil
}

// fixArchiveTimes rewrites a gzipped tar with every entry's time set to
// created and no time or name in the gzip header, keeping names, modes and
// contents.
func fixArchiveTimes(tgz []byte, created time.Time) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		fixed := &tar.Header{Name: h.Name, Mode: h.Mode, Size: h.Size, Typeflag: h.Typeflag, ModTime: created.UTC().Truncate(time.Second), Format: tar.FormatPAX}
		if err := tw.WriteHeader(fixed); err != nil {
			return nil, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// PushChart pushes a chart archive to repo (e.g. registry.example.com/charts)
// as an OCI artifact tagged with its version, through Helm's own registry
// client (what `helm push` does), with the creation time fixed so that the
// manifest's digest is the same for the same archive. Credentials are
// Helm's (`helm registry login`). It returns the manifest's digest.
func PushChart(data []byte, repo, name, version string, created time.Time, plainHTTP bool) (string, error) {
	opts := []registry.ClientOption{registry.ClientOptWriter(io.Discard)}
	if plainHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	client, err := registry.NewClient(opts...)
	if err != nil {
		return "", err
	}
	res, err := client.Push(data, fmt.Sprintf("%s/%s:%s", repo, name, version),
		registry.PushOptCreationTime(created.UTC().Format(time.RFC3339)))
	if err != nil {
		return "", fmt.Errorf("pushing chart %s %s to %s: %w", name, version, repo, err)
	}
	return res.Manifest.Digest, nil
}

package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/cli"
	"helm.sh/helm/v3/pkg/registry"
	"helm.sh/helm/v3/pkg/storage/driver"

	"github.com/kubefarm/kubefarm/hack/release"
)

// The scenarios install both charts the way a user installs a release:
// from an OCI registry (the local one) with Helm's registry client, not
// from the checkout. Up packages them as a release does (hack/release)
// and pushes them under ChartVersion.
const (
	ChartRegistry = RegistryAddr + "/charts"
	ChartVersion  = "0.0.0-e2e"
)

// ChartRef is the OCI reference of one of the repository's charts as Up
// pushed it, e.g. oci://127.0.0.1:5001/charts/kubefarm:0.0.0-e2e.
func ChartRef(name string) string {
	return "oci://" + ChartRegistry + "/" + name + ":" + ChartVersion
}

// PushCharts packages each chart of the checkout at root under
// ChartVersion (images left at their usual repositories, which the
// cluster's containerd mirrors to the local registry) and pushes it to
// ChartRegistry, replacing what an earlier bring-up pushed.
func PushCharts(root string) error {
	return pushCharts(root, ChartVersion)
}

// pushCharts packages the charts of the tree at root as a release does,
// under version, and pushes them to ChartRegistry.
func pushCharts(root, version string) error {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, dir := range release.ChartDirs {
		c, data, err := release.PackageChart(filepath.Join(root, dir), version, release.DefaultImageRepository, created)
		if err != nil {
			return err
		}
		digest, err := release.PushChart(data, ChartRegistry, c.Name(), version, created, true)
		if err != nil {
			return err
		}
		fmt.Printf("  chart oci://%s/%s:%s@%s\n", ChartRegistry, c.Name(), version, digest)
	}
	return nil
}

// loadChart loads a chart from a folder, or, for oci://<repository>/<name>:<version>,
// pulls it with Helm's registry client as `helm install oci://... --version` does.
func loadChart(ref string) (*chart.Chart, error) {
	oci, ok := strings.CutPrefix(ref, "oci://")
	if !ok {
		c, err := loader.Load(ref)
		if err != nil {
			return nil, fmt.Errorf("loading %s: %w", ref, err)
		}
		return c, nil
	}
	client, err := registry.NewClient(registry.ClientOptPlainHTTP(), registry.ClientOptWriter(io.Discard))
	if err != nil {
		return nil, err
	}
	res, err := client.Pull(oci)
	if err != nil {
		return nil, fmt.Errorf("pulling %s: %w", ref, err)
	}
	return loader.LoadArchive(bytes.NewReader(res.Chart.Data))
}

// HelmInstall installs (or upgrades) a chart (a folder or an oci:// reference) with the
// Helm SDK, waiting for its resources like `helm upgrade --install --wait`.
func (c *Cluster) HelmInstall(ctx context.Context, release, namespace, chartRef string, values map[string]any) error {
	_, err := HelmUpgradeInstall(ctx, c.AdminKubeconfig(), release, namespace, chartRef, values)
	return err
}

// helmConfig is the Helm SDK's configuration for one namespace of the
// cluster behind kubeconfig, releases stored as Secrets (Helm's default).
func helmConfig(kubeconfig, namespace string) (*action.Configuration, error) {
	settings := cli.New()
	settings.KubeConfig = kubeconfig
	settings.SetNamespace(namespace)
	cfg := new(action.Configuration)
	if err := cfg.Init(settings.RESTClientGetter(), namespace, "secret", func(string, ...any) {}); err != nil {
		return nil, err
	}
	return cfg, nil
}

// HelmUpgradeInstall is `helm upgrade --install --wait --create-namespace
// <release> <chartRef> -n <namespace>` with values (chartRef a folder or
// an oci:// reference with its version), through the Helm SDK, on
// the cluster behind kubeconfig. It returns the release's rendered manifest.
func HelmUpgradeInstall(ctx context.Context, kubeconfig, release, namespace, chartRef string, values map[string]any) (string, error) {
	cfg, err := helmConfig(kubeconfig, namespace)
	if err != nil {
		return "", err
	}
	chart, err := loadChart(chartRef)
	if err != nil {
		return "", err
	}
	history := action.NewHistory(cfg)
	history.Max = 1
	if _, err := history.Run(release); err == driver.ErrReleaseNotFound {
		install := action.NewInstall(cfg)
		install.ReleaseName, install.Namespace, install.CreateNamespace = release, namespace, true
		install.Wait, install.Timeout = true, 5*time.Minute
		rel, err := install.RunWithContext(ctx, chart, values)
		if err != nil {
			return "", err
		}
		return rel.Manifest, nil
	} else if err != nil {
		return "", err
	}
	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace, upgrade.Wait, upgrade.Timeout = namespace, true, 5*time.Minute
	rel, err := upgrade.RunWithContext(ctx, release, chart, values)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// HelmValues are the values a release was installed with (`helm get
// values`), the user's only.
func HelmValues(kubeconfig, release, namespace string) (map[string]any, error) {
	cfg, err := helmConfig(kubeconfig, namespace)
	if err != nil {
		return nil, err
	}
	return action.NewGetValues(cfg).Run(release)
}

// HelmManifest is the rendered manifest of the release's current revision
// (`helm get manifest`).
func HelmManifest(kubeconfig, release, namespace string) (string, error) {
	cfg, err := helmConfig(kubeconfig, namespace)
	if err != nil {
		return "", err
	}
	rel, err := action.NewGet(cfg).Run(release)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// HelmUninstall is `helm uninstall --wait <release> -n <namespace>`: it
// returns once the release's objects are deleted (finalizers run).
func HelmUninstall(kubeconfig, release, namespace string) error {
	cfg, err := helmConfig(kubeconfig, namespace)
	if err != nil {
		return err
	}
	un := action.NewUninstall(cfg)
	un.Wait, un.Timeout = true, 5*time.Minute
	_, err = un.Run(release)
	return err
}

// Ports of kubefarm-pxe on the boot network. Both listen on BootAddr only
// (nothing else of the host's), on ports nothing of the cluster uses.
const (
	PXEHTTPPort = 8080
	PXETFTPPort = 69
)

// PXEMetricsAddr is kubefarm-pxe's /healthz and /metrics listener: the
// node's loopback (the chart's default host), where the kubelet probes it
// and the e2e tests, on the same host, scrape it; off the chart's default
// port, which something else on a shared host may hold.
const PXEMetricsAddr = "127.0.0.1:19090"

// ChartValues are the values `up` installs charts/kubefarm-operator with:
// kubefarm-manager and kubefarm-pxe by the digests just pushed (a rebuilt
// image rolls its pods on a warm bring-up), kubefarm-pxe serving the boot
// network: authoritative DHCP on BootBridge, TFTP and HTTP on BootAddr.
func (c *Cluster) ChartValues(digests map[string]string) map[string]any {
	image := func(ref string) map[string]any {
		repo, tag, _ := strings.Cut(ref, ":")
		return map[string]any{"repository": repo, "tag": tag, "digest": digests[ref], "pullPolicy": "IfNotPresent"}
	}
	ip := c.BootAddr.IP.String()
	return map[string]any{
		"image": image(ManagerImage),
		"pxe": map[string]any{
			"enabled":     true,
			"image":       image(PXEImage),
			"serverIP":    ip,
			"httpAddr":    fmt.Sprintf("%s:%d", ip, PXEHTTPPort),
			"metricsAddr": PXEMetricsAddr,
			"dhcp":        map[string]any{"interface": c.BootBridge, "mode": "authoritative"},
			"tftp":        map[string]any{"enabled": true, "addr": fmt.Sprintf("%s:%d", ip, PXETFTPPort)},
			"ipxe":        map[string]any{"dir": IPXEDir},
			// A pool's catch-all range with unknownMachines: Hold boots
			// an unknown machine in discovery mode (TestNodeJoin's
			// discovery step); pools without a range are unaffected.
			"discovery": map[string]any{"enabled": true},
			// Node images are pushed to the local registry, plain HTTP,
			// on the host's loopback, which artifact fetches refuse
			// unless allowed.
			"artifacts": map[string]any{"insecureRegistry": true},
			"fetch":     map[string]any{"allowedCIDRs": []any{strings.Split(RegistryAddr, ":")[0] + "/32"}},
			// The e2e node is small; the defaults fit a real one.
			"resources": map[string]any{"requests": map[string]any{"cpu": "50m", "memory": "64Mi"}},
		},
	}
}

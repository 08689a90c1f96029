package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/cli"
	"helm.sh/helm/v3/pkg/storage/driver"
)

// HelmInstall installs (or upgrades) a chart from a local folder with the
// Helm SDK, waiting for its resources like `helm upgrade --install --wait`.
func (c *Cluster) HelmInstall(ctx context.Context, release, namespace, chartDir string, values map[string]any) error {
	settings := cli.New()
	settings.KubeConfig = c.AdminKubeconfig()
	settings.SetNamespace(namespace)
	cfg := new(action.Configuration)
	if err := cfg.Init(settings.RESTClientGetter(), namespace, "secret", func(string, ...any) {}); err != nil {
		return err
	}
	chart, err := loader.Load(chartDir)
	if err != nil {
		return fmt.Errorf("loading %s: %w", chartDir, err)
	}
	history := action.NewHistory(cfg)
	history.Max = 1
	if _, err := history.Run(release); err == driver.ErrReleaseNotFound {
		install := action.NewInstall(cfg)
		install.ReleaseName, install.Namespace, install.CreateNamespace = release, namespace, true
		install.Wait, install.Timeout = true, 5*time.Minute
		_, err := install.RunWithContext(ctx, chart, values)
		return err
	} else if err != nil {
		return err
	}
	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace, upgrade.Wait, upgrade.Timeout = namespace, true, 5*time.Minute
	_, err = upgrade.RunWithContext(ctx, release, chart, values)
	return err
}

// Ports of kubefarm-pxe on the boot network. Both listen on BootAddr only
// (nothing else of the host's), on ports nothing of the cluster uses.
const (
	PXEHTTPPort = 8080
	PXETFTPPort = 69
)

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
			"enabled":  true,
			"image":    image(PXEImage),
			"serverIP": ip,
			"httpAddr": fmt.Sprintf("%s:%d", ip, PXEHTTPPort),
			"dhcp":     map[string]any{"interface": c.BootBridge, "mode": "authoritative"},
			"tftp":     map[string]any{"enabled": true, "addr": fmt.Sprintf("%s:%d", ip, PXETFTPPort)},
			"ipxe":     map[string]any{"dir": IPXEDir},
			// Node images are pushed to the local registry, plain HTTP.
			"artifacts": map[string]any{"insecureRegistry": true},
			// The e2e node is small; the defaults fit a real one.
			"resources": map[string]any{"requests": map[string]any{"cpu": "50m", "memory": "64Mi"}},
		},
	}
}

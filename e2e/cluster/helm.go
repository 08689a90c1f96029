package cluster

import (
	"context"
	"fmt"
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

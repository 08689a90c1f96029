package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InstallCertManager runs cert-manager's controller and CA injector as pods,
// with cert-manager's CRDs from its Go module (the pinned version).
func (c *Cluster) InstallCertManager(ctx context.Context, crdDir string) error {
	files, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no cert-manager CRDs in %s", crdDir)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := c.kubectlApply(ctx, string(data)); err != nil {
			return err
		}
	}
	manifest := fmt.Sprintf(certManagerManifest, CertManagerVersion, CertManagerVersion)
	if err := c.kubectlApply(ctx, manifest); err != nil {
		return err
	}
	return c.waitDeployments(ctx, "cert-manager", "cert-manager", "cert-manager-cainjector")
}

func (c *Cluster) waitDeployments(ctx context.Context, namespace string, names ...string) error {
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	for _, n := range names {
		var last *appsv1.Deployment
		err := c.waitFor(ctx, "kube-apiserver", 5*time.Minute, func(ctx context.Context) (bool, error) {
			d, err := cs.AppsV1().Deployments(namespace).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last = d
			return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == *d.Spec.Replicas &&
				d.Status.AvailableReplicas == *d.Spec.Replicas, nil
		})
		if err != nil {
			status := "never seen"
			if last != nil {
				status = fmt.Sprintf("%d/%d available", last.Status.AvailableReplicas, *last.Spec.Replicas)
			}
			return fmt.Errorf("deployment %s/%s not available (%s): %w", namespace, n, status, err)
		}
	}
	return nil
}

// certManagerManifest runs the two cert-manager components. Their RBAC is
// broad on purpose: this is test infrastructure, not the product.
const certManagerManifest = `
apiVersion: v1
kind: Namespace
metadata: {name: cert-manager}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: cert-manager, namespace: cert-manager}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kubefarm-e2e-cert-manager}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: ServiceAccount, name: cert-manager, namespace: cert-manager}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: cert-manager, namespace: cert-manager}
spec:
  replicas: 1
  selector: {matchLabels: {app: cert-manager}}
  template:
    metadata: {labels: {app: cert-manager}}
    spec:
      serviceAccountName: cert-manager
      containers:
      - name: controller
        image: quay.io/jetstack/cert-manager-controller:%s
        imagePullPolicy: Always
        args: [--cluster-resource-namespace=cert-manager]
        securityContext: {runAsNonRoot: true, runAsUser: 1000, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: cert-manager-cainjector, namespace: cert-manager}
spec:
  replicas: 1
  selector: {matchLabels: {app: cert-manager-cainjector}}
  template:
    metadata: {labels: {app: cert-manager-cainjector}}
    spec:
      serviceAccountName: cert-manager
      containers:
      - name: cainjector
        image: quay.io/jetstack/cert-manager-cainjector:%s
        imagePullPolicy: Always
        securityContext: {runAsNonRoot: true, runAsUser: 1000, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
`

// WaitWebhookCA waits until every webhook of a ValidatingWebhookConfiguration
// carries a CA bundle, injected by cert-manager's CA injector.
func (c *Cluster) WaitWebhookCA(ctx context.Context, name string) error {
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	return c.waitFor(ctx, "kube-apiserver", 2*time.Minute, func(ctx context.Context) (bool, error) {
		cfg, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(cfg.Webhooks) == 0 {
			return false, nil
		}
		for _, w := range cfg.Webhooks {
			if len(w.ClientConfig.CABundle) == 0 {
				return false, nil
			}
		}
		return true, nil
	})
}

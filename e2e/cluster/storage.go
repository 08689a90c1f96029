package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Storage: the cluster has no provisioner, so Up pre-creates a few hostPath
// PersistentVolumes under StateDir/volumes (removed with StateDir by Down)
// and a default StorageClass, StorageClassName, that binds claims to them
// when their pod is scheduled. Enough for one run of the scenarios, which
// use ten (etcd members of five tenants, two of them scaled to three, a
// restored one, and a backup claim; deleted claims are only recycled at the
// next bring-up) with room to spare. There
// is no recycler either, so every bring-up (also a warm one, on a running
// cluster) recycles the volumes whose claims were deleted: it empties their
// directories and makes them Available again.
const (
	StorageClassName = "kubefarm-e2e"
	StaticVolumes    = 14
	staticVolumeSize = "2Gi"
)

// volumeOwner owns the volume directories: the "nonroot" user the control
// plane images run as. hostPath volumes get no fsGroup ownership change.
const volumeOwner = 65532

func (c *Cluster) ensureStorage(ctx context.Context) error {
	if err := c.recycleVolumes(ctx); err != nil {
		return fmt.Errorf("recycling released volumes: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: %s
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
`, StorageClassName)
	for i := range StaticVolumes {
		dir := c.path("volumes", fmt.Sprintf("pv%d", i))
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
		if err := os.Chown(dir, volumeOwner, volumeOwner); err != nil {
			return err
		}
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: PersistentVolume
metadata: {name: %s-pv%d, labels: {kubefarm.io/e2e: "true"}}
spec:
  storageClassName: %s
  capacity: {storage: %s}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: %q, type: Directory}
`, StorageClassName, i, StorageClassName, staticVolumeSize, dir)
	}
	return c.kubectlApply(ctx, b.String())
}

// recycleVolumes wipes every Released e2e volume and clears its claim
// reference, which returns it to Available. The directory is emptied before
// the claim reference goes, so no new claim can bind to old data.
func (c *Cluster) recycleVolumes(ctx context.Context) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.AdminKubeconfig())
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	pvs, err := cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{LabelSelector: "kubefarm.io/e2e=true"})
	if err != nil {
		return err
	}
	for _, pv := range pvs.Items {
		if pv.Status.Phase != corev1.VolumeReleased || pv.Spec.HostPath == nil {
			continue
		}
		dir := pv.Spec.HostPath.Path
		if !strings.HasPrefix(dir, c.path("volumes")+string(os.PathSeparator)) {
			return fmt.Errorf("volume %s points outside the state directory: %s", pv.Name, dir)
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
		if err := os.Chown(dir, volumeOwner, volumeOwner); err != nil {
			return err
		}
		if _, err := cs.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType,
			[]byte(`{"spec":{"claimRef":null}}`), metav1.PatchOptions{FieldManager: "kubefarm-e2e"}); err != nil {
			return err
		}
		fmt.Printf("  recycled volume %s\n", pv.Name)
	}
	return nil
}

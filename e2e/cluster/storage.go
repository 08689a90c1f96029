package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// Storage: the cluster has no provisioner, so Up pre-creates a few hostPath
// PersistentVolumes under StateDir/volumes (removed with StateDir by Down)
// and a default StorageClass, StorageClassName, that binds claims to them
// when their pod is scheduled. Enough for the scenarios' etcd members; a
// released volume is not reused (its reclaim policy is Retain: there is no
// recycler), so each bring-up has StaticVolumes claims to spend.
const (
	StorageClassName = "kubefarm-e2e"
	StaticVolumes    = 6
	staticVolumeSize = "2Gi"
)

// volumeOwner owns the volume directories: the "nonroot" user the control
// plane images run as. hostPath volumes get no fsGroup ownership change.
const volumeOwner = 65532

func (c *Cluster) ensureStorage(ctx context.Context) error {
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

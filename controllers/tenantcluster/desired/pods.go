package desired

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// SecretData is the observed content of the tenant's certificate Secrets:
// Secret name -> key -> bytes. The reconciler passes what it read; a missing
// Secret or key is allowed (the checksum records its absence, so its arrival
// rolls the pods again).
type SecretData map[string]map[string][]byte

// secretMount is one PKI Secret mounted into a container with only the keys
// that container needs: a component never sees a private key it does not use.
type secretMount struct {
	role PKIRole
	keys []string
}

// nonRootID is the conventional "nonroot" user of distroless images, which
// the Kubernetes, etcd and Konnectivity images are.
const nonRootID int64 = 65532

// Secret files are readable by the pod's fsGroup only; 0440 rather than 0400
// because the kubelet makes the files group-owned by fsGroup, not by the
// container's user.
const secretFileMode int32 = 0o440

func (c *Cluster) secretVolumeName(role PKIRole) string { return "pki-" + string(role) }

const (
	volumeConfig       = "config"
	volumeKonnectivity = "konnectivity-uds"
	volumeTmp          = "tmp"
	volumeEtcdData     = "data"
)

// podVolumes are the volumes of a pod: one per mounted Secret, with the union
// of the keys its containers need, plus the config ConfigMap restricted to
// the keys needed. Sorted by name so the pod spec is stable.
func (c *Cluster) podVolumes(mounts []secretMount, configKeys []string, extra ...corev1.Volume) []corev1.Volume {
	keysByRole := map[PKIRole][]string{}
	for _, m := range mounts {
		keysByRole[m.role] = sortedUnique(append(keysByRole[m.role], m.keys...))
	}
	var vols []corev1.Volume
	for _, role := range sortedKeys(keysByRole) {
		var items []corev1.KeyToPath
		for _, k := range keysByRole[role] {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
		vols = append(vols, corev1.Volume{
			Name: c.secretVolumeName(role),
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName:  c.volumeSecretName(role),
				Items:       items,
				DefaultMode: ptrTo(secretFileMode),
			}},
		})
	}
	if len(configKeys) > 0 {
		var items []corev1.KeyToPath
		for _, k := range sortedUnique(configKeys) {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
		vols = append(vols, corev1.Volume{
			Name: volumeConfig,
			VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: c.ConfigMapName()},
				Items:                items,
				DefaultMode:          ptrTo(int32(0o444)),
			}},
		})
	}
	vols = append(vols, corev1.Volume{Name: volumeTmp, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	vols = append(vols, extra...)
	slices.SortFunc(vols, func(a, b corev1.Volume) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return vols
}

// volumeMounts mounts each Secret at /etc/kubernetes/pki/<role>, the config
// directory when the container reads configuration, and a writable /tmp
// (the root filesystem is read-only).
func (c *Cluster) volumeMounts(mounts []secretMount, config bool) []corev1.VolumeMount {
	var out []corev1.VolumeMount
	roles := make([]PKIRole, 0, len(mounts))
	for _, m := range mounts {
		roles = append(roles, m.role)
	}
	slices.Sort(roles)
	for _, r := range slices.Compact(roles) {
		out = append(out, corev1.VolumeMount{Name: c.secretVolumeName(r), MountPath: pkiDir + "/" + string(r), ReadOnly: true})
	}
	if config {
		out = append(out, corev1.VolumeMount{Name: volumeConfig, MountPath: configDir, ReadOnly: true})
	}
	out = append(out, corev1.VolumeMount{Name: volumeTmp, MountPath: tmpDir})
	return out
}

// checksum hashes exactly the Secret keys a pod mounts and the generated
// configuration it reads. It covers only what the pod uses, so renewing the
// scheduler's certificate does not restart kube-apiserver, and a CA's
// private key does not enter the hash of a pod that only trusts the CA.
// Every value is length-prefixed, so no two inputs share a hash by
// concatenation.
func (c *Cluster) checksum(secrets SecretData, mounts []secretMount, config map[string]string, configKeys []string) string {
	h := sha256.New()
	write := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	keysByRole := map[PKIRole][]string{}
	for _, m := range mounts {
		keysByRole[m.role] = sortedUnique(append(keysByRole[m.role], m.keys...))
	}
	for _, role := range sortedKeys(keysByRole) {
		name := c.volumeSecretName(role)
		for _, k := range keysByRole[role] {
			write([]byte("secret/" + name + "/" + k))
			if v, ok := secrets[name][k]; ok {
				write([]byte{1})
				write(v)
			} else {
				write([]byte{0})
			}
		}
	}
	for _, k := range sortedUnique(configKeys) {
		write([]byte("config/" + k))
		write([]byte(config[k]))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func sortedKeys[K ~string, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// podSecurityContext runs every control plane pod as the nonroot user with
// the runtime's default seccomp profile.
func podSecurityContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:        ptrTo(true),
		RunAsUser:           ptrTo(nonRootID),
		RunAsGroup:          ptrTo(nonRootID),
		FSGroup:             ptrTo(nonRootID),
		FSGroupChangePolicy: ptrTo(corev1.FSGroupChangeOnRootMismatch),
		SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// containerSecurityContext: no component needs a capability, a writable root
// filesystem or privilege escalation; all listen on unprivileged ports.
func containerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptrTo(false),
		ReadOnlyRootFilesystem:   ptrTo(true),
		RunAsNonRoot:             ptrTo(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

func container(name, image string, command, args []string) corev1.Container {
	return corev1.Container{
		Name:                     name,
		Image:                    image,
		ImagePullPolicy:          corev1.PullIfNotPresent,
		Command:                  command,
		Args:                     args,
		SecurityContext:          containerSecurityContext(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

func requests(cpu, memory string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourceMemory: resource.MustParse(memory),
	}}
}

func httpProbe(path string, port int32, scheme corev1.URIScheme, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: path, Port: intstr.FromInt32(port), Scheme: scheme,
		}},
		PeriodSeconds:    period,
		TimeoutSeconds:   5,
		FailureThreshold: failures,
	}
}

// basePodSpec is what every control plane pod shares. The pods get no
// admin-cluster service-account token (they never call the admin cluster's
// API) and no service environment variables (tenant components must not
// discover admin-cluster Services by accident). Where they run and how
// their replicas spread is spec.placement's (placePod).
func (c *Cluster) basePodSpec(component string) corev1.PodSpec {
	pod := corev1.PodSpec{
		AutomountServiceAccountToken: ptrTo(false),
		EnableServiceLinks:           ptrTo(false),
		SecurityContext:              podSecurityContext(),
	}
	c.placePod(&pod, component)
	return pod
}

func (c *Cluster) kubeImage(component string) string {
	return c.Images.Registry + "/" + component + ":" + c.Version
}

func (c *Cluster) etcdImage() string { return c.Images.Registry + "/etcd:" + c.Images.EtcdTag }

func (c *Cluster) konnectivityImage() string {
	return c.Images.Registry + "/kas-network-proxy/proxy-server:" + c.Images.KonnectivityTag
}

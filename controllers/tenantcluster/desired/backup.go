package desired

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/robfig/cron/v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/s3target"
)

// The etcd backup: a CronJob runs `kubefarm-etcd snapshot` (cmd/kubefarm-etcd)
// from the tools image against the members' client URLs, with a client
// certificate of its own from the etcd CA, and writes verified snapshots,
// each with its sealed key file (backupkey.go), to a PersistentVolumeClaim.
// The restore: each etcd member gets an init container that runs
// `kubefarm-etcd restore` from a snapshot on a claim into its empty data
// directory, only while etcd is being bootstrapped.

// ComponentEtcdBackup is the component label of the backup CronJob, its Jobs
// and pods, and of the claim kubefarm creates for the snapshots.
const ComponentEtcdBackup = "etcd-backup"

// RoleEtcdBackupClient is the backup's identity towards etcd, issued only
// while backups are configured.
const RoleEtcdBackupClient PKIRole = "etcd-backup-client"

// Defaults mirrored from the CRD's markers.
const (
	defaultBackupSchedule = "0 */6 * * *"
	defaultBackupRetain   = 7
	defaultBackupSize     = "10Gi"
)

// Where the tool finds things in its pods.
const (
	toolsBinary       = "/usr/local/bin/kubefarm-etcd"
	backupMount       = "/backup"
	restoreMount      = "/restore"
	volumeBackup      = "backup"
	volumeRestore     = "restore"
	containerSnapshot = "snapshot"
	containerRestore  = "restore"
)

// Bounds of one backup run: a snapshot of etcd's largest quota streams in
// minutes, not hours; a run that takes longer is stuck.
const (
	backupRunDeadlineSeconds int64 = 30 * 60
	backupStartingDeadline   int64 = 10 * 60
	backupHistory            int32 = 3
	backupAttempts           int32 = 2
)

// Backup is spec.etcd.backup resolved.
type Backup struct {
	Schedule string
	TimeZone *string
	Suspend  bool
	Retain   int32
	// ClaimName is the claim snapshots go to; CreateClaim says kubefarm
	// makes it (spec.etcd.backup.volume.claimName was empty).
	ClaimName    string
	CreateClaim  bool
	Size         resource.Quantity
	StorageClass *string
	// S3 is the bucket snapshots are uploaded to instead (then ClaimName
	// is empty and no claim is made).
	S3 *BackupS3
	// KeySecret is the backup key Secret each snapshot's key file is
	// sealed to; CreateKeySecret says kubefarm makes it
	// (spec.etcd.backup.keys.secretName was empty, see backupkey.go).
	KeySecret       string
	CreateKeySecret bool
}

// BackupS3 is spec.etcd.backup.s3 resolved: Prefix has its default.
type BackupS3 struct {
	Endpoint, Bucket, Prefix, Region string
	CredentialsSecret, CAConfigMap   string
}

// The S3 credentials' keys in spec.etcd.backup.s3.credentialsSecret; the
// run gets them in the environment variables of s3target, which the tool
// reads.
const (
	S3AccessKeyIDKey     = "accessKeyID"
	S3SecretAccessKeyKey = "secretAccessKey"
	S3CAKey              = "ca.crt"
	s3CAMount            = "/etc/kubefarm/s3-ca"
	volumeS3CA           = "s3-ca"
)

// resolveBackup validates spec.etcd.backup and fills its defaults.
func (c *Cluster) resolveBackup(b *v1alpha1.EtcdBackup, fp *field.Path) field.ErrorList {
	if b == nil {
		return nil
	}
	var errs field.ErrorList
	out := &Backup{Schedule: b.Schedule, TimeZone: cloneStringPtr(b.TimeZone), Suspend: b.Suspend,
		Retain: defaultBackupRetain, ClaimName: b.Volume.ClaimName, StorageClass: cloneStringPtr(b.Volume.StorageClassName)}
	if out.Schedule == "" {
		out.Schedule = defaultBackupSchedule
	}
	// The CronJob controller parses the schedule with the same library;
	// refusing it here names the field instead of failing the apply.
	if _, err := cron.ParseStandard(out.Schedule); err != nil || strings.Contains(out.Schedule, "TZ=") {
		msg := "must be a cron schedule such as \"0 */6 * * *\" (time zone in timeZone, not in the schedule)"
		if err != nil {
			msg += ": " + err.Error()
		}
		errs = append(errs, field.Invalid(fp.Child("schedule"), out.Schedule, msg))
	}
	if b.Retain != nil {
		out.Retain = *b.Retain
	}
	if out.Retain < 1 || out.Retain > 1000 {
		errs = append(errs, field.Invalid(fp.Child("retain"), out.Retain, "must be between 1 and 1000"))
	}
	var keyErrs field.ErrorList
	out.KeySecret, out.CreateKeySecret, keyErrs = c.resolveBackupKeys(b.Keys, fp.Child("keys"))
	errs = append(errs, keyErrs...)
	if b.S3 != nil {
		if out.ClaimName != "" {
			errs = append(errs, field.Invalid(fp.Child("volume", "claimName"), out.ClaimName,
				"volume.claimName and s3 are exclusive: snapshots go to one place"))
		}
		var s3errs field.ErrorList
		out.S3, s3errs = resolveS3(c.Namespace, c.Name, b.S3, fp.Child("s3"))
		errs = append(errs, s3errs...)
		out.ClaimName = ""
	} else if out.ClaimName == "" {
		out.ClaimName, out.CreateClaim = EtcdBackupClaimName(c.Name, b), true
		out.Size = resource.MustParse(defaultBackupSize)
		if b.Volume.Size != nil {
			out.Size = b.Volume.Size.DeepCopy()
		}
		if out.Size.Sign() <= 0 {
			errs = append(errs, field.Invalid(fp.Child("volume", "size"), out.Size.String(), "must be positive"))
		}
	} else {
		errs = append(errs, objectName(fp.Child("volume", "claimName"), out.ClaimName)...)
	}
	c.Backup = out
	return errs
}

// resolveS3 validates spec.etcd.backup.s3 (or restoreFrom.s3) with the
// tool's own rules (so a bad value is refused here, naming the field, not
// by every run) and fills the default prefix, that of tenant's snapshots.
func resolveS3(namespace, tenant string, s3 *v1alpha1.EtcdBackupS3, fp *field.Path) (*BackupS3, field.ErrorList) {
	var errs field.ErrorList
	out := &BackupS3{Endpoint: s3.Endpoint, Bucket: s3.Bucket, Prefix: etcdBackupS3Prefix(namespace, tenant, s3),
		Region: s3.Region, CredentialsSecret: s3.CredentialsSecret, CAConfigMap: s3.CAConfigMap}
	if err := s3target.ValidateEndpoint(out.Endpoint); err != nil {
		shown := out.Endpoint
		if strings.Contains(shown, "@") {
			shown = "(not shown: it may hold a credential)"
		}
		errs = append(errs, field.Invalid(fp.Child("endpoint"), shown, err.Error()))
	} else if out.CAConfigMap != "" && strings.HasPrefix(out.Endpoint, "http://") {
		errs = append(errs, field.Invalid(fp.Child("caConfigMap"), out.CAConfigMap, "a CA needs an https:// endpoint"))
	}
	if err := s3target.ValidateBucket(out.Bucket); err != nil {
		errs = append(errs, field.Invalid(fp.Child("bucket"), out.Bucket, err.Error()))
	}
	if err := s3target.ValidatePrefix(out.Prefix); err != nil {
		errs = append(errs, field.Invalid(fp.Child("prefix"), s3.Prefix, err.Error()))
	}
	if err := s3target.ValidateRegion(out.Region); err != nil {
		errs = append(errs, field.Invalid(fp.Child("region"), out.Region, err.Error()))
	}
	errs = append(errs, objectName(fp.Child("credentialsSecret"), out.CredentialsSecret)...)
	if out.CAConfigMap != "" { // optional: without it, the system roots
		errs = append(errs, objectName(fp.Child("caConfigMap"), out.CAConfigMap)...)
	}
	return out, errs
}

// resolveRestore validates spec.etcd.restoreFrom.
func (c *Cluster) resolveRestore(r *v1alpha1.EtcdRestoreSource, fp *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	switch {
	case r.ClaimName != "" && r.S3 != nil:
		errs = append(errs, field.Invalid(fp.Child("claimName"), r.ClaimName, "exactly one of claimName and s3: the snapshot is on a claim or in a bucket"))
	case r.S3 == nil:
		errs = append(errs, objectName(fp.Child("claimName"), r.ClaimName)...)
	}
	if !validSnapshotName(r.Snapshot) {
		errs = append(errs, field.Invalid(fp.Child("snapshot"), r.Snapshot,
			"must be a file name in the claim's top directory ending in .db, such as <tenant>-20261124T030000Z.db"))
	}
	c.RestoreFrom = r.DeepCopy()
	key, keyErrs := resolveRestoreKey(r, fp)
	c.RestoreKeySecret = key
	errs = append(errs, keyErrs...)
	if r.S3 != nil {
		s3, s3errs := c.resolveRestoreS3(r, fp.Child("s3"))
		c.RestoreS3 = s3
		errs = append(errs, s3errs...)
	}
	return errs
}

// validSnapshotName accepts a plain file name: no directory, nothing hidden.
func validSnapshotName(s string) bool {
	if len(s) < 4 || len(s) > 200 || !strings.HasSuffix(s, ".db") || s[0] == '.' || s[0] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// EtcdBackupClaimName is the claim spec.etcd.backup writes to:
// volume.claimName, or "<tenant>-etcd-backup", which kubefarm creates.
func EtcdBackupClaimName(tenant string, b *v1alpha1.EtcdBackup) string {
	if b != nil && b.Volume.ClaimName != "" {
		return b.Volume.ClaimName
	}
	return tenant + "-" + ComponentEtcdBackup
}

// EtcdBackupPlace says where tc's snapshots go, for messages: "on claim
// <name>" or "under s3://<bucket>/<prefix>".
func EtcdBackupPlace(tc *v1alpha1.TenantCluster) string {
	b := tc.Spec.Etcd.Backup
	if b != nil && b.S3 != nil {
		return "under s3://" + b.S3.Bucket + "/" + etcdBackupS3Prefix(tc.Namespace, tc.Name, b.S3)
	}
	return "on claim " + EtcdBackupClaimName(tc.Name, b)
}

// etcdBackupS3Prefix is spec.etcd.backup.s3.prefix, by default
// "<namespace>/<tenant>/": tenants of one name in two namespaces can share
// a bucket.
func etcdBackupS3Prefix(namespace, tenant string, s3 *v1alpha1.EtcdBackupS3) string {
	if s3.Prefix != "" {
		return s3.Prefix
	}
	return namespace + "/" + tenant + "/"
}

// EtcdBackupName is the name of the backup CronJob.
func (c *Cluster) EtcdBackupName() string { return c.prefixed(ComponentEtcdBackup) }

// EtcdBackupClaim is the claim kubefarm creates for the snapshots, or nil
// when backups are off or the spec names an existing claim. It carries no
// owner reference (the caller must not set one): snapshots must outlive the
// TenantCluster, or a deleted tenant could never be restored.
func EtcdBackupClaim(c *Cluster) *corev1.PersistentVolumeClaim {
	if c.Backup == nil || !c.Backup.CreateClaim {
		return nil
	}
	pvc := &corev1.PersistentVolumeClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{Name: c.Backup.ClaimName, Namespace: c.Namespace, Labels: c.labels(ComponentEtcdBackup)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: cloneStringPtr(c.Backup.StorageClass),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: c.Backup.Size}},
		},
	}
	if pvc.Spec.StorageClassName != nil && *pvc.Spec.StorageClassName == "" {
		pvc.Spec.StorageClassName = nil // the default class, as for etcd's volumes
	}
	return pvc
}

// EtcdBackupCronJob builds the backup CronJob, or nil when backups are off.
// One run at a time (Forbid): two snapshots racing for the same retention
// would delete each other's files. Failed runs' pods are kept (restart
// policy Never, history of three) so that their termination messages and
// logs say why.
func EtcdBackupCronJob(c *Cluster) (*batchv1.CronJob, error) {
	if c.Backup == nil {
		return nil, nil
	}
	if c.Images.Tools == "" {
		return nil, fmt.Errorf("spec.etcd.backup needs the etcd tools image: the manager runs without --etcd-tools-image")
	}
	pod := c.etcdBackupPod()
	labels := c.labels(ComponentEtcdBackup)
	return &batchv1.CronJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"},
		ObjectMeta: metav1.ObjectMeta{Name: c.EtcdBackupName(), Namespace: c.Namespace, Labels: labels},
		Spec: batchv1.CronJobSpec{
			Schedule:                   c.Backup.Schedule,
			TimeZone:                   cloneStringPtr(c.Backup.TimeZone),
			Suspend:                    ptrTo(c.Backup.Suspend),
			ConcurrencyPolicy:          batchv1.ForbidConcurrent,
			StartingDeadlineSeconds:    ptrTo(backupStartingDeadline),
			SuccessfulJobsHistoryLimit: ptrTo(backupHistory),
			FailedJobsHistoryLimit:     ptrTo(backupHistory),
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: batchv1.JobSpec{
					BackoffLimit:          ptrTo(backupAttempts - 1),
					ActiveDeadlineSeconds: ptrTo(backupRunDeadlineSeconds),
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec:       pod,
					},
				},
			},
		},
	}, nil
}

// etcdBackupPod is the pod of one snapshot run; c.Backup is set.
func (c *Cluster) etcdBackupPod() corev1.PodSpec {
	pki := path.Join(pkiDir, string(RoleEtcdBackupClient))
	args := []string{
		"snapshot",
		"--endpoints=" + strings.Join(c.EtcdClientURLs(), ","),
		// The etcd CA as the members trust it (its bundle during a
		// rotation), not the client certificate's issuer: during a
		// rotation the two differ while the members' server certificates
		// are re-issued.
		"--cacert=" + pkiFile(RoleEtcdCA, secretCertKey),
		"--cert=" + path.Join(pki, secretCertKey),
		"--key=" + path.Join(pki, secretPrivateKeyKey),
		"--dir=" + backupMount,
		"--prefix=" + c.Name,
		"--retain=" + strconv.Itoa(int(c.Backup.Retain)),
	}
	keyArgs, keyMounts, keyVolumes := c.backupKeysWiring()
	args = append(args, keyArgs...)
	// The snapshot lands on the claim, or (S3) is staged in an emptyDir
	// and uploaded; the credentials come in as environment variables from
	// the Secret, never as arguments.
	backupSource := corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.Backup.ClaimName}}
	var env []corev1.EnvVar
	var s3Volumes []corev1.Volume
	var s3Mounts []corev1.VolumeMount
	if s3 := c.Backup.S3; s3 != nil {
		backupSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		var s3Args []string
		s3Args, env, s3Mounts, s3Volumes = backupS3Wiring(s3)
		args = append(args, s3Args...)
	}
	// The tool writes its JSON result to the termination message, which
	// the controller reads back; a run that dies before writing it leaves
	// its log's tail there instead (FallbackToLogsOnError).
	ctr := container(containerSnapshot, c.Images.Tools, []string{toolsBinary}, args)
	ctr.Resources = c.resources(ComponentEtcdBackup, "10m", "32Mi")
	// A writable /tmp, as every control plane container has: the root
	// file system is read-only.
	ctr.VolumeMounts = []corev1.VolumeMount{
		{Name: c.secretVolumeName(RoleEtcdBackupClient), MountPath: pki, ReadOnly: true},
		{Name: c.secretVolumeName(RoleEtcdCA), MountPath: pkiFile(RoleEtcdCA, ""), ReadOnly: true},
		{Name: volumeBackup, MountPath: backupMount},
		{Name: volumeTmp, MountPath: tmpDir},
	}
	ctr.VolumeMounts = append(append(ctr.VolumeMounts, keyMounts...), s3Mounts...)
	ctr.Env = env
	pod := c.basePodSpec(ComponentEtcdBackup)
	pod.RestartPolicy = corev1.RestartPolicyNever
	pod.Containers = []corev1.Container{ctr}
	pod.Volumes = []corev1.Volume{
		{Name: volumeTmp, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: volumeBackup, VolumeSource: backupSource},
		{Name: c.secretVolumeName(RoleEtcdBackupClient), VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  c.SecretName(RoleEtcdBackupClient),
			DefaultMode: ptrTo(secretFileMode),
			Items: []corev1.KeyToPath{
				{Key: secretCertKey, Path: secretCertKey}, {Key: secretPrivateKeyKey, Path: secretPrivateKeyKey},
			},
		}}},
		{Name: c.secretVolumeName(RoleEtcdCA), VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  c.volumeSecretName(RoleEtcdCA),
			DefaultMode: ptrTo(secretFileMode),
			Items:       []corev1.KeyToPath{{Key: secretCertKey, Path: secretCertKey}},
		}}},
	}
	pod.Volumes = append(append(pod.Volumes, keyVolumes...), s3Volumes...)
	return pod
}

// backupS3Wiring is what the snapshot container needs to upload to s3:
// its arguments, the credentials as environment variables and the CA
// bundle's mount and volume, if any.
func backupS3Wiring(s3 *BackupS3) (args []string, env []corev1.EnvVar, mounts []corev1.VolumeMount, volumes []corev1.Volume) {
	args = []string{"--s3-endpoint=" + s3.Endpoint, "--s3-bucket=" + s3.Bucket, "--s3-prefix=" + s3.Prefix}
	if s3.Region != "" {
		args = append(args, "--s3-region="+s3.Region)
	}
	env = []corev1.EnvVar{
		envFromSecret(s3target.EnvAccessKeyID, s3.CredentialsSecret, S3AccessKeyIDKey),
		envFromSecret(s3target.EnvSecretAccessKey, s3.CredentialsSecret, S3SecretAccessKeyKey),
	}
	if s3.CAConfigMap != "" {
		args = append(args, "--s3-ca-file="+path.Join(s3CAMount, S3CAKey))
		mounts = []corev1.VolumeMount{{Name: volumeS3CA, MountPath: s3CAMount, ReadOnly: true}}
		volumes = []corev1.Volume{{Name: volumeS3CA, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: s3.CAConfigMap},
			Items:                []corev1.KeyToPath{{Key: S3CAKey, Path: S3CAKey}},
		}}}}
	}
	return args, env, mounts, volumes
}

// envFromSecret is an environment variable read from a Secret's key: the
// value never appears in the pod spec.
func envFromSecret(name, secret, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key,
	}}}
}

// restoreInitContainer restores c.RestoreFrom into an empty data directory
// before etcd starts, and returns the volumes it needs besides the
// member's. The tool itself refuses to touch a data directory that holds a
// member, and restores only when the state the member reads is "new", so a
// member that restarts, or one recreated after the cluster exists, never
// gets the snapshot's old data (nor downloads it from a bucket).
func (c *Cluster) restoreInitContainer() (corev1.Container, []corev1.Volume) {
	self := c.etcdMemberHost("$(POD_NAME)")
	source, env, mounts, volumes := c.restoreSource()
	args := append(source,
		"--data-dir="+etcdDataDir,
		"--name=$(POD_NAME)",
		"--initial-cluster=$("+EtcdInitialClusterEnv+")",
		"--initial-advertise-peer-urls="+fmt.Sprintf("https://%s:%d", self, EtcdPeerPort),
		"--initial-cluster-token="+c.etcdClusterToken(),
		"--initial-cluster-state=$("+EtcdStateEnv+")",
	)
	ctr := container(containerRestore, c.Images.Tools, []string{toolsBinary}, append([]string{"restore"}, args...))
	ctr.Resources = c.resources(ComponentEtcd, "50m", "64Mi")
	ctr.VolumeMounts = append([]corev1.VolumeMount{
		{Name: volumeEtcdData, MountPath: etcdDataMount},
		{Name: volumeTmp, MountPath: tmpDir},
	}, mounts...)
	ctr.Env = env
	return ctr, volumes
}

// etcdClusterToken is --initial-cluster-token: unique per tenant so members
// of two tenants can never form one cluster even if DNS or certificates
// were mixed up. A restore must use the same one.
func (c *Cluster) etcdClusterToken() string { return c.Namespace + "-" + c.Name }

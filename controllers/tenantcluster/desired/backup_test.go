package desired

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"filippo.io/age"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/backupkeys"
)

func toolsOptions() Options {
	o := testOptions()
	o.Images.Tools = "ghcr.io/kubefarm/kubefarm-manager:v1@sha256:" + strings.Repeat("a", 64)
	return o
}

func withBackup(b v1alpha1.EtcdBackup) func(*v1alpha1.TenantCluster) {
	return func(tc *v1alpha1.TenantCluster) { tc.Spec.Etcd.Backup = &b }
}

func withRestore(claim, file string) func(*v1alpha1.TenantCluster) {
	return func(tc *v1alpha1.TenantCluster) {
		tc.Spec.Etcd.RestoreFrom = &v1alpha1.EtcdRestoreSource{ClaimName: claim, Snapshot: file}
	}
}

func goodS3() *v1alpha1.EtcdBackupS3 {
	return &v1alpha1.EtcdBackupS3{Endpoint: "https://s3.example.com", Bucket: "etcd-backups", CredentialsSecret: "s3-creds"}
}

// withS3 is a backup to goodS3 changed by mod.
func withS3(mod func(*v1alpha1.EtcdBackupS3)) func(*v1alpha1.TenantCluster) {
	s3 := goodS3()
	mod(s3)
	return withBackup(v1alpha1.EtcdBackup{S3: s3})
}

func argValue(args []string, flag string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
	}
	return "", false
}

func TestEtcdBackupCronJob(t *testing.T) {
	t.Run("off by default: no CronJob, no claim, no certificate", func(t *testing.T) {
		c := mustResolve(t, newTC(), toolsOptions())
		if cj, err := EtcdBackupCronJob(c); cj != nil || err != nil {
			t.Errorf("EtcdBackupCronJob = %v, %v; want nothing", cj, err)
		}
		if EtcdBackupClaim(c) != nil {
			t.Error("a claim without spec.etcd.backup")
		}
		for _, cert := range Certificates(c) {
			if cert.Name == c.SecretName(RoleEtcdBackupClient) {
				t.Error("a backup client certificate without spec.etcd.backup")
			}
		}
	})

	t.Run("defaults", func(t *testing.T) {
		c := mustResolve(t, newTC(withBackup(v1alpha1.EtcdBackup{})), toolsOptions())
		cj, err := EtcdBackupCronJob(c)
		if err != nil {
			t.Fatal(err)
		}
		if cj.Name != "alpha-etcd-backup" || cj.Namespace != "tenants" {
			t.Errorf("CronJob %s/%s", cj.Namespace, cj.Name)
		}
		s := cj.Spec
		if s.Schedule != "0 */6 * * *" || s.ConcurrencyPolicy != batchv1.ForbidConcurrent || *s.Suspend ||
			*s.SuccessfulJobsHistoryLimit != 3 || *s.FailedJobsHistoryLimit != 3 || s.StartingDeadlineSeconds == nil {
			t.Errorf("CronJob spec %+v", s)
		}
		job := s.JobTemplate.Spec
		if job.ActiveDeadlineSeconds == nil || *job.BackoffLimit != 1 {
			t.Errorf("a run is not bounded: deadline %v, backoffLimit %v", job.ActiveDeadlineSeconds, job.BackoffLimit)
		}
		pod := job.Template.Spec
		if pod.RestartPolicy != corev1.RestartPolicyNever || *pod.AutomountServiceAccountToken || pod.SecurityContext == nil || !*pod.SecurityContext.RunAsNonRoot {
			t.Errorf("pod: restart %s, token %v, security %+v", pod.RestartPolicy, *pod.AutomountServiceAccountToken, pod.SecurityContext)
		}
		if len(pod.Containers) != 1 {
			t.Fatalf("%d containers", len(pod.Containers))
		}
		ctr := pod.Containers[0]
		if ctr.Image != toolsOptions().Images.Tools || !slices.Equal(ctr.Command, []string{"/usr/local/bin/kubefarm-etcd"}) || ctr.Args[0] != "snapshot" {
			t.Errorf("container runs %s %v %v", ctr.Image, ctr.Command, ctr.Args)
		}
		for flag, want := range map[string]string{
			"--endpoints": strings.Join(c.EtcdClientURLs(), ","),
			"--cacert":    "/etc/kubernetes/pki/etcd-ca/tls.crt",
			"--cert":      "/etc/kubernetes/pki/etcd-backup-client/tls.crt",
			"--key":       "/etc/kubernetes/pki/etcd-backup-client/tls.key",
			"--dir":       "/backup",
			"--prefix":    "alpha",
			"--retain":    "7",
		} {
			if got, _ := argValue(ctr.Args, flag); got != want {
				t.Errorf("%s=%q, want %q", flag, got, want)
			}
		}
		if ctr.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
			t.Errorf("termination message policy %s", ctr.TerminationMessagePolicy)
		}
		if ctr.SecurityContext == nil || !*ctr.SecurityContext.ReadOnlyRootFilesystem || *ctr.SecurityContext.AllowPrivilegeEscalation {
			t.Errorf("container security %+v", ctr.SecurityContext)
		}
		var claim string
		var secrets []string
		for _, v := range pod.Volumes {
			if v.PersistentVolumeClaim != nil {
				claim = v.PersistentVolumeClaim.ClaimName
			}
			if v.Secret != nil {
				secrets = append(secrets, v.Secret.SecretName)
			}
		}
		if claim != "alpha-etcd-backup" || !slices.Equal(secrets, []string{"alpha-etcd-backup-client", "alpha-etcd-ca", "alpha-encryption-config", "alpha-etcd-backup-key"}) {
			t.Errorf("volumes: claim %q, secrets %q", claim, secrets)
		}
		// During a rotation of the etcd CA the run trusts its bundle, as
		// the members do.
		rotating := *c
		rotating.CATrust = map[PKIRole]CATrust{RoleEtcdCA: {Trusted: []int{1, 2}, Signer: 2}}
		for _, v := range rotating.etcdBackupPod().Volumes {
			if v.Name == "pki-etcd-ca" && v.Secret.SecretName != "alpha-etcd-ca-trust" {
				t.Errorf("rotating: the backup mounts %s for the etcd CA", v.Secret.SecretName)
			}
		}

		pvc := EtcdBackupClaim(c)
		if pvc == nil {
			t.Fatal("no claim")
		}
		if pvc.Name != "alpha-etcd-backup" || len(pvc.OwnerReferences) != 0 || pvc.Spec.StorageClassName != nil ||
			!pvc.Spec.Resources.Requests.Storage().Equal(resource.MustParse("10Gi")) {
			t.Errorf("claim %s owners %v class %v size %v", pvc.Name, pvc.OwnerReferences, pvc.Spec.StorageClassName, pvc.Spec.Resources.Requests.Storage())
		}
		if pvc.Labels[LabelName] != ComponentEtcdBackup {
			t.Errorf("claim labels %v: etcd's volume deletion selects %s=%s and must not take it", pvc.Labels, LabelName, ComponentEtcd)
		}

		var found bool
		for _, cert := range Certificates(c) {
			if cert.Name != c.SecretName(RoleEtcdBackupClient) {
				continue
			}
			found = true
			if cert.Spec.IssuerRef.Name != c.CAName(RoleEtcdCA, 1) || cert.Spec.CommonName != "kubefarm-etcd-backup" || cert.Spec.IsCA {
				t.Errorf("backup certificate %+v", cert.Spec)
			}
		}
		if !found {
			t.Error("no backup client certificate")
		}
	})

	t.Run("an existing claim, schedule, zone, retention, suspension", func(t *testing.T) {
		zone := "Europe/Berlin"
		c := mustResolve(t, newTC(withBackup(v1alpha1.EtcdBackup{Schedule: "30 2 * * 0", TimeZone: &zone, Suspend: true, Retain: ptrTo[int32](30),
			Volume: v1alpha1.EtcdBackupVolume{ClaimName: "nfs-backups"}})), toolsOptions())
		if EtcdBackupClaim(c) != nil {
			t.Error("kubefarm creates a claim although the spec names one")
		}
		cj, err := EtcdBackupCronJob(c)
		if err != nil {
			t.Fatal(err)
		}
		if cj.Spec.Schedule != "30 2 * * 0" || *cj.Spec.TimeZone != zone || !*cj.Spec.Suspend {
			t.Errorf("CronJob spec %+v", cj.Spec)
		}
		ctr := cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0]
		if got, _ := argValue(ctr.Args, "--retain"); got != "30" {
			t.Errorf("--retain=%s", got)
		}
		if v := cj.Spec.JobTemplate.Spec.Template.Spec.Volumes[1]; v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "nfs-backups" {
			t.Errorf("volume %+v", v)
		}
	})

	t.Run("S3: no claim, an emptyDir to stage, the bucket flags, credentials from the Secret", func(t *testing.T) {
		s3 := &v1alpha1.EtcdBackupS3{Endpoint: "https://s3.example.com:9000", Bucket: "etcd-backups", Region: "eu-central-1",
			CredentialsSecret: "s3-creds", CAConfigMap: "s3-ca"}
		c := mustResolve(t, newTC(withBackup(v1alpha1.EtcdBackup{S3: s3})), toolsOptions())
		if EtcdBackupClaim(c) != nil {
			t.Error("a claim for an S3 target")
		}
		cj, err := EtcdBackupCronJob(c)
		if err != nil {
			t.Fatal(err)
		}
		pod := cj.Spec.JobTemplate.Spec.Template.Spec
		ctr := pod.Containers[0]
		for flag, want := range map[string]string{
			"--s3-endpoint": s3.Endpoint, "--s3-bucket": "etcd-backups", "--s3-region": "eu-central-1",
			"--s3-prefix": c.Namespace + "/" + c.Name + "/", "--s3-ca-file": "/etc/kubefarm/s3-ca/ca.crt", "--dir": "/backup",
		} {
			if got, ok := argValue(ctr.Args, flag); !ok || got != want {
				t.Errorf("%s=%q (set %v), want %q", flag, got, ok, want)
			}
		}
		env := map[string]corev1.EnvVar{}
		for _, e := range ctr.Env {
			env[e.Name] = e
		}
		for name, key := range map[string]string{"AWS_ACCESS_KEY_ID": "accessKeyID", "AWS_SECRET_ACCESS_KEY": "secretAccessKey"} {
			e, ok := env[name]
			if !ok || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
				e.ValueFrom.SecretKeyRef.Name != "s3-creds" || e.ValueFrom.SecretKeyRef.Key != key {
				t.Errorf("env %s = %+v, want Secret s3-creds key %s", name, e, key)
			}
		}
		if len(ctr.Env) != 2 {
			t.Errorf("env %+v, want exactly the two credentials", ctr.Env)
		}
		vols := map[string]corev1.Volume{}
		for _, v := range pod.Volumes {
			vols[v.Name] = v
		}
		if v := vols["backup"]; v.EmptyDir == nil || v.PersistentVolumeClaim != nil {
			t.Errorf("backup volume %+v, want an emptyDir", v)
		}
		if v := vols["s3-ca"]; v.ConfigMap == nil || v.ConfigMap.Name != "s3-ca" || len(v.ConfigMap.Items) != 1 || v.ConfigMap.Items[0].Key != "ca.crt" {
			t.Errorf("CA volume %+v", v)
		}
		mounted := false
		for _, m := range ctr.VolumeMounts {
			if m.Name == "s3-ca" {
				mounted = m.ReadOnly && m.MountPath == "/etc/kubefarm/s3-ca"
			}
		}
		if !mounted {
			t.Errorf("CA not mounted read-only: %+v", ctr.VolumeMounts)
		}
		if got := EtcdBackupPlace(newTC(withBackup(v1alpha1.EtcdBackup{S3: s3}))); got != "under s3://etcd-backups/"+c.Namespace+"/"+c.Name+"/" {
			t.Errorf("EtcdBackupPlace = %q", got)
		}
	})

	t.Run("S3 without a CA or region, an explicit prefix", func(t *testing.T) {
		c := mustResolve(t, newTC(withBackup(v1alpha1.EtcdBackup{S3: &v1alpha1.EtcdBackupS3{
			Endpoint: "http://minio.storage.svc:9000", Bucket: "b01", Prefix: "prod/", CredentialsSecret: "creds"}})), toolsOptions())
		cj, _ := EtcdBackupCronJob(c)
		pod := cj.Spec.JobTemplate.Spec.Template.Spec
		for _, flag := range []string{"--s3-ca-file", "--s3-region"} {
			if v, ok := argValue(pod.Containers[0].Args, flag); ok {
				t.Errorf("%s=%s set", flag, v)
			}
		}
		if got, _ := argValue(pod.Containers[0].Args, "--s3-prefix"); got != "prod/" {
			t.Errorf("--s3-prefix=%s", got)
		}
		for _, v := range pod.Volumes {
			if v.Name == "s3-ca" {
				t.Error("a CA volume without caConfigMap")
			}
		}
	})

	t.Run("placement applies to the backup pods", func(t *testing.T) {
		c := mustResolve(t, newTC(withBackup(v1alpha1.EtcdBackup{}), func(tc *v1alpha1.TenantCluster) {
			tc.Spec.Placement.NodeSelector = map[string]string{"role": "control-plane"}
			tc.Spec.Placement.PriorityClassName = "tenant-control-plane"
		}), toolsOptions())
		cj, _ := EtcdBackupCronJob(c)
		pod := cj.Spec.JobTemplate.Spec.Template.Spec
		if pod.NodeSelector["role"] != "control-plane" || pod.PriorityClassName != "tenant-control-plane" {
			t.Errorf("backup pod placement: %v %q", pod.NodeSelector, pod.PriorityClassName)
		}
	})
}

func TestEtcdBackupAndRestoreRefused(t *testing.T) {
	for _, tt := range []struct {
		name string
		mod  func(*v1alpha1.TenantCluster)
		opts Options
		want string
	}{
		{"a bad schedule", withBackup(v1alpha1.EtcdBackup{Schedule: "every six hours"}), toolsOptions(), "spec.etcd.backup.schedule"},
		{"a time zone in the schedule", withBackup(v1alpha1.EtcdBackup{Schedule: "TZ=UTC 0 * * * *"}), toolsOptions(), "spec.etcd.backup.schedule"},
		{"no retention", withBackup(v1alpha1.EtcdBackup{Retain: ptrTo[int32](0)}), toolsOptions(), "spec.etcd.backup.retain"},
		{"a claim name that is no name", withBackup(v1alpha1.EtcdBackup{Volume: v1alpha1.EtcdBackupVolume{ClaimName: "Not_A_Name"}}), toolsOptions(),
			"spec.etcd.backup.volume.claimName"},
		{"a zero size", withBackup(v1alpha1.EtcdBackup{Volume: v1alpha1.EtcdBackupVolume{Size: ptrTo(resource.MustParse("0"))}}), toolsOptions(),
			"spec.etcd.backup.volume.size"},
		{"backup without the tools image", withBackup(v1alpha1.EtcdBackup{}), testOptions(), "spec.etcd.backup: Forbidden"},
		{"a claim and S3", withBackup(v1alpha1.EtcdBackup{Volume: v1alpha1.EtcdBackupVolume{ClaimName: "c"}, S3: goodS3()}), toolsOptions(),
			"spec.etcd.backup.volume.claimName"},
		{"an S3 endpoint with a path", withS3(func(s *v1alpha1.EtcdBackupS3) { s.Endpoint = "https://s3.example.com/bucket" }), toolsOptions(),
			"spec.etcd.backup.s3.endpoint"},
		{"an S3 endpoint with credentials", withS3(func(s *v1alpha1.EtcdBackupS3) { s.Endpoint = "https://k:s@s3.example.com" }), toolsOptions(),
			"spec.etcd.backup.s3.endpoint: Invalid value: \"(not shown: it may hold a credential)\""},
		{"a bucket in capitals", withS3(func(s *v1alpha1.EtcdBackupS3) { s.Bucket = "Backups" }), toolsOptions(), "spec.etcd.backup.s3.bucket"},
		{"a prefix escaping", withS3(func(s *v1alpha1.EtcdBackupS3) { s.Prefix = "../other/" }), toolsOptions(), "spec.etcd.backup.s3.prefix"},
		{"a prefix without a slash", withS3(func(s *v1alpha1.EtcdBackupS3) { s.Prefix = "tenants" }), toolsOptions(), "spec.etcd.backup.s3.prefix"},
		{"a region with spaces", withS3(func(s *v1alpha1.EtcdBackupS3) { s.Region = "eu central" }), toolsOptions(), "spec.etcd.backup.s3.region"},
		{"no credentials Secret", withS3(func(s *v1alpha1.EtcdBackupS3) { s.CredentialsSecret = "" }), toolsOptions(),
			"spec.etcd.backup.s3.credentialsSecret"},
		{"a CA for plain HTTP", withS3(func(s *v1alpha1.EtcdBackupS3) { s.Endpoint, s.CAConfigMap = "http://minio:9000", "ca" }), toolsOptions(),
			"spec.etcd.backup.s3.caConfigMap"},
		{"restore without the tools image", withRestore("b", "alpha-1.db"), testOptions(), "spec.etcd.restoreFrom: Forbidden"},
		{"a snapshot path", withRestore("b", "../etc/passwd.db"), toolsOptions(), "spec.etcd.restoreFrom.snapshot"},
		{"a hidden snapshot", withRestore("b", ".alpha.db"), toolsOptions(), "spec.etcd.restoreFrom.snapshot"},
		{"not a snapshot", withRestore("b", "alpha.tar"), toolsOptions(), "spec.etcd.restoreFrom.snapshot"},
		{"a restore claim that is no name", withRestore("B/C", "alpha-1.db"), toolsOptions(), "spec.etcd.restoreFrom.claimName"},
		{"a key Secret that is no name", withBackup(v1alpha1.EtcdBackup{Keys: v1alpha1.EtcdBackupKeys{SecretName: "Backup_Key"}}), toolsOptions(),
			"spec.etcd.backup.keys.secretName"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Resolve(newTC(tt.mod), tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Resolve error %v, want one naming %s", err, tt.want)
			}
		})
	}
}

func TestEtcdRestoreInitContainer(t *testing.T) {
	c := mustResolve(t, newTC(withRestore("alpha-etcd-backup", "alpha-20261124T030000Z.db")), toolsOptions())
	sts, err := EtcdStatefulSet(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	pod := sts.Spec.Template.Spec
	if len(pod.InitContainers) != 1 {
		t.Fatalf("%d init containers, want the restore", len(pod.InitContainers))
	}
	ini, etcd := pod.InitContainers[0], pod.Containers[0]
	etcdArgs := map[string]string{}
	for _, flag := range []string{"--initial-advertise-peer-urls", "--initial-cluster-token", "--data-dir", "--name"} {
		etcdArgs[flag], _ = argValue(etcd.Args, flag)
	}
	// The restored member must be the member etcd then starts as: etcd
	// reads its initial cluster and state from the environment (the state
	// ConfigMap), the restore gets the same values through the same env.
	if v, ok := argValue(etcd.Args, "--initial-cluster"); ok {
		t.Errorf("etcd --initial-cluster=%s is a flag: it must come from the state ConfigMap", v)
	}
	for flag, want := range map[string]string{
		"--snapshot":                    "/restore/alpha-20261124T030000Z.db",
		"--data-dir":                    etcdArgs["--data-dir"],
		"--name":                        etcdArgs["--name"],
		"--initial-cluster":             "$(" + EtcdInitialClusterEnv + ")",
		"--initial-advertise-peer-urls": etcdArgs["--initial-advertise-peer-urls"],
		"--initial-cluster-token":       etcdArgs["--initial-cluster-token"],
		"--initial-cluster-state":       "$(" + EtcdStateEnv + ")",
	} {
		if got, _ := argValue(ini.Args, flag); got != want || want == "" {
			t.Errorf("restore %s=%q, want %q", flag, got, want)
		}
	}
	if !slices.Equal(ini.Env, etcd.Env) {
		t.Errorf("restore env %v, etcd's %v: the expansions must agree", ini.Env, etcd.Env)
	}
	for _, name := range []string{EtcdInitialClusterEnv, EtcdStateEnv, "POD_NAME"} {
		if !slices.ContainsFunc(ini.Env, func(e corev1.EnvVar) bool { return e.Name == name }) {
			t.Errorf("restore env has no %s", name)
		}
	}
	var mountedRO, dataShared bool
	for _, m := range ini.VolumeMounts {
		mountedRO = mountedRO || (m.Name == volumeRestore && m.ReadOnly)
		dataShared = dataShared || (m.Name == volumeEtcdData && m.MountPath == etcdDataMount)
	}
	if !mountedRO || !dataShared {
		t.Errorf("restore mounts %+v: want the snapshot claim read-only and etcd's data volume", ini.VolumeMounts)
	}
	var claim *corev1.PersistentVolumeClaimVolumeSource
	for _, v := range pod.Volumes {
		if v.Name == volumeRestore {
			claim = v.PersistentVolumeClaim
		}
	}
	if claim == nil || claim.ClaimName != "alpha-etcd-backup" || !claim.ReadOnly {
		t.Errorf("restore volume %+v", claim)
	}

	// Without restoreFrom (or once the controller cleared it) nothing is left.
	c.RestoreFrom = nil
	sts, err = EtcdStatefulSet(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(sts.Spec.Template.Spec.InitContainers); n != 0 {
		t.Errorf("%d init containers without restoreFrom", n)
	}
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == volumeRestore {
			t.Error("the snapshot claim is still mounted without restoreFrom")
		}
	}
}

func TestEtcdBackupKeys(t *testing.T) {
	for _, tt := range []struct {
		name       string
		backup     v1alpha1.EtcdBackup
		wantSecret string
		wantCreate bool
	}{
		{"the default Secret, on a claim", v1alpha1.EtcdBackup{}, "alpha-etcd-backup-key", true},
		{"the default Secret, to S3", v1alpha1.EtcdBackup{S3: goodS3()}, "alpha-etcd-backup-key", true},
		{"the operator's Secret", v1alpha1.EtcdBackup{Keys: v1alpha1.EtcdBackupKeys{SecretName: "ops-backup-key"}}, "ops-backup-key", false},
		{"the operator's Secret, to S3", v1alpha1.EtcdBackup{S3: goodS3(), Keys: v1alpha1.EtcdBackupKeys{SecretName: "ops-backup-key"}},
			"ops-backup-key", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := mustResolve(t, newTC(withBackup(tt.backup)), toolsOptions())
			if c.Backup.KeySecret != tt.wantSecret || c.Backup.CreateKeySecret != tt.wantCreate {
				t.Errorf("key Secret %q (create %v), want %q (create %v)", c.Backup.KeySecret, c.Backup.CreateKeySecret, tt.wantSecret, tt.wantCreate)
			}
			id, err := age.GenerateX25519Identity()
			if err != nil {
				t.Fatal(err)
			}
			// Not printed: it would hold an identity.
			if made := NewEtcdBackupKeySecret(c, id) != nil; made != tt.wantCreate {
				t.Errorf("NewEtcdBackupKeySecret made a Secret: %v, want one only for the default Secret", made)
			}
			cj, err := EtcdBackupCronJob(c)
			if err != nil {
				t.Fatal(err)
			}
			pod := cj.Spec.JobTemplate.Spec.Template.Spec
			ctr := pod.Containers[0]
			// Fixed flags, after the snapshot's own and before the
			// bucket's: the CronJob does not change from pass to pass.
			cfgAt, recAt := slices.Index(ctr.Args, "--keys-config=/etc/kubefarm/backup-keys/config/encryption-configuration.json"),
				slices.Index(ctr.Args, "--keys-recipients=/etc/kubefarm/backup-keys/recipients/recipients")
			retainAt := slices.IndexFunc(ctr.Args, func(a string) bool { return strings.HasPrefix(a, "--retain=") })
			if cfgAt < 0 || recAt != cfgAt+1 || retainAt != cfgAt-1 {
				t.Errorf("args %q: want --keys-config and --keys-recipients right after --retain", ctr.Args)
			}
			if s3At := slices.IndexFunc(ctr.Args, func(a string) bool { return strings.HasPrefix(a, "--s3-") }); s3At >= 0 && s3At < recAt {
				t.Errorf("args %q: the key flags after the bucket's", ctr.Args)
			}
			vols := map[string]corev1.Volume{}
			for _, v := range pod.Volumes {
				vols[v.Name] = v
			}
			mounts := map[string]corev1.VolumeMount{}
			for _, m := range ctr.VolumeMounts {
				mounts[m.MountPath] = m
			}
			for dir, want := range map[string]struct{ secret, key string }{
				"/etc/kubefarm/backup-keys/config":     {"alpha-encryption-config", "encryption-configuration.json"},
				"/etc/kubefarm/backup-keys/recipients": {tt.wantSecret, "recipients"},
			} {
				m, ok := mounts[dir]
				if !ok || !m.ReadOnly {
					t.Errorf("%s: mount %+v (found %v), want read-only", dir, m, ok)
					continue
				}
				v := vols[m.Name].Secret
				// One item: the key Secret's identity must never reach the pod.
				if v == nil || v.SecretName != want.secret || len(v.Items) != 1 || v.Items[0].Key != want.key || v.Items[0].Path != want.key ||
					*v.DefaultMode != secretFileMode {
					t.Errorf("%s: volume %+v, want Secret %s with its key %s alone", dir, v, want.secret, want.key)
				}
			}
			for _, v := range pod.Volumes {
				if v.Secret == nil {
					continue
				}
				for _, item := range v.Secret.Items {
					if item.Key == BackupKeyIdentityKey {
						t.Errorf("volume %s mounts the backup key's identity", v.Name)
					}
				}
			}
		})
	}
}

func TestNewEtcdBackupKeySecret(t *testing.T) {
	c := mustResolve(t, newTC(withBackup(v1alpha1.EtcdBackup{})), toolsOptions())
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	s := NewEtcdBackupKeySecret(c, id)
	if s == nil {
		t.Fatal("no default backup key Secret")
	}
	if s.Name != "alpha-etcd-backup-key" || s.Namespace != "tenants" || s.Type != corev1.SecretTypeOpaque || len(s.OwnerReferences) != 0 {
		t.Errorf("Secret %s/%s type %s owners %v", s.Namespace, s.Name, s.Type, s.OwnerReferences)
	}
	if s.Labels[LabelName] != ComponentEtcdBackup || s.Labels[v1alpha1.LabelTenantCluster] != "alpha" || s.Labels[LabelManagedBy] != "kubefarm" {
		t.Errorf("labels %v", s.Labels)
	}
	if len(s.Data) != 2 {
		t.Errorf("keys %v, want identity and recipients", slices.Sorted(maps.Keys(s.Data)))
	}
	parsed, err := age.ParseX25519Identity(string(s.Data[BackupKeyIdentityKey]))
	if err != nil {
		t.Fatalf("identity does not parse: %v", err)
	}
	if parsed.String() != id.String() {
		t.Error("identity is not the one passed in")
	}
	if got, want := string(s.Data[BackupKeyRecipientsKey]), parsed.Recipient().String()+"\n"; got != want {
		t.Errorf("recipients %q, want the identity's recipient %q", got, want)
	}
	if _, err := backupkeys.ParseRecipients(s.Data[BackupKeyRecipientsKey]); err != nil {
		t.Errorf("the default Secret's recipients: %v", err)
	}
	for _, v := range s.Annotations {
		if strings.Contains(v, "AGE-SECRET-KEY") {
			t.Error("an annotation carries the identity")
		}
	}
	off := mustResolve(t, newTC(), toolsOptions())
	if NewEtcdBackupKeySecret(off, id) != nil {
		t.Error("a backup key Secret without spec.etcd.backup")
	}
}

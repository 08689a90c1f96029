package desired

import (
	"bytes"
	"fmt"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// buildAll builds every object of a tenant, in a fixed order.
func buildAll(t *testing.T, c *Cluster, secrets SecretData) []runtime.Object {
	t.Helper()
	var out []runtime.Object
	for _, is := range Issuers(c) {
		out = append(out, is)
	}
	for _, cert := range Certificates(c) {
		out = append(out, cert)
	}
	cm, err := ConfigMap(c)
	if err != nil {
		t.Fatal(err)
	}
	sts, api, kcm, sched := workloadObjects(t, c, secrets)
	out = append(out, cm, EtcdService(c), sts, APIServerService(c), api, kcm, sched)
	for _, p := range PodDisruptionBudgets(c) {
		out = append(out, p)
	}
	for _, b := range TenantRBAC(c) {
		out = append(out, b)
	}
	return out
}

func sampleSecrets() SecretData {
	d := SecretData{}
	for i, role := range []PKIRole{RoleCA, RoleFrontProxyCA, RoleEtcdCA, RoleAPIServer, RoleAPIServerKubeletClient,
		RoleAPIServerEtcdClient, RoleFrontProxyClient, RoleEtcdServer, RoleEtcdPeer, RoleControllerManager,
		RoleScheduler, RoleKonnectivityServer, RoleKonnectivityClient, RoleServiceAccount} {
		d["alpha-"+string(role)] = map[string][]byte{
			"tls.crt": []byte(fmt.Sprintf("cert-%d", i)),
			"tls.key": []byte(fmt.Sprintf("key-%d", i)),
			"ca.crt":  []byte("ca"),
		}
	}
	return d
}

func manyArgs() map[string]string {
	m := map[string]string{}
	for i := range 100 {
		m[fmt.Sprintf("extra-%02d", i)] = fmt.Sprint(i)
	}
	return m
}

func TestEverythingIsDeterministic(t *testing.T) {
	mk := func() *Cluster {
		return resolveTC(t, func(tc *v1alpha1.TenantCluster) {
			tc.Spec.APIServer.ExtraArgs = manyArgs()
			tc.Spec.ControllerManager.ExtraArgs = manyArgs()
			tc.Spec.Scheduler.ExtraArgs = manyArgs()
			tc.Spec.APIServer.CertSANs = []string{"z.example", "10.0.0.1", "a.example"}
			tc.Spec.Network.PodCIDR = "10.244.0.0/16"
		})
	}
	first := buildAll(t, mk(), sampleSecrets())
	firstYAML := toYAML(t, first...)
	for i := range 10 {
		again := buildAll(t, mk(), sampleSecrets())
		if !reflect.DeepEqual(first, again) {
			t.Fatalf("run %d: objects differ (reflect.DeepEqual)", i)
		}
		if y := toYAML(t, again...); !bytes.Equal(firstYAML, y) {
			t.Fatalf("run %d: YAML differs", i)
		}
	}
}

func TestEtcdStatefulSet(t *testing.T) {
	class := "fast"
	empty := ""
	cases := []struct {
		name        string
		replicas    int32
		class       *string
		reclaim     v1alpha1.VolumeReclaimPolicy
		wantClass   *string
		wantDeleted appsv1.PersistentVolumeClaimRetentionPolicyType
	}{
		{"single member default class", 1, nil, "", nil, appsv1.RetainPersistentVolumeClaimRetentionPolicyType},
		{"three members named class", 3, &class, v1alpha1.VolumeReclaimDelete, &class, appsv1.DeletePersistentVolumeClaimRetentionPolicyType},
		{"empty class means default", 3, &empty, v1alpha1.VolumeReclaimRetain, nil, appsv1.RetainPersistentVolumeClaimRetentionPolicyType},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			c := resolveTC(t, func(tc *v1alpha1.TenantCluster) {
				tc.Spec.Etcd.Replicas = tt.replicas
				tc.Spec.Etcd.StorageClassName = tt.class
				tc.Spec.VolumeReclaimPolicy = tt.reclaim
			})
			sts, err := EtcdStatefulSet(c, nil)
			if err != nil {
				t.Fatal(err)
			}
			s := sts.Spec
			if *s.Replicas != tt.replicas || s.ServiceName != "alpha-etcd" || s.PodManagementPolicy != appsv1.ParallelPodManagement {
				t.Errorf("replicas=%d service=%s policy=%s", *s.Replicas, s.ServiceName, s.PodManagementPolicy)
			}
			pvc := s.VolumeClaimTemplates[0]
			if got := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; got.String() != "2Gi" {
				t.Errorf("storage = %s", got.String())
			}
			if !reflect.DeepEqual(pvc.Spec.StorageClassName, tt.wantClass) {
				t.Errorf("storage class = %v, want %v", pvc.Spec.StorageClassName, tt.wantClass)
			}
			if s.PersistentVolumeClaimRetentionPolicy.WhenDeleted != tt.wantDeleted ||
				s.PersistentVolumeClaimRetentionPolicy.WhenScaled != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
				t.Errorf("retention = %+v", s.PersistentVolumeClaimRetentionPolicy)
			}
			ctr := s.Template.Spec.Containers[0]
			if ctr.Env[0].Name != "POD_NAME" || ctr.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.name" {
				t.Errorf("POD_NAME env = %+v", ctr.Env)
			}
			// The initial cluster state is read from the state ConfigMap
			// at start, so it can change without rolling the members.
			// So is the initial cluster, which changes with the membership.
			if len(ctr.Env) != 3 {
				t.Fatalf("etcd env = %+v", ctr.Env)
			}
			for i, kv := range [][2]string{1: {EtcdStateEnv, EtcdStateKey}, 2: {EtcdInitialClusterEnv, EtcdInitialClusterKey}} {
				if i == 0 {
					continue
				}
				e := ctr.Env[i]
				if e.Name != kv[0] || e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil ||
					e.ValueFrom.ConfigMapKeyRef.Name != c.EtcdStateConfigMapName() || e.ValueFrom.ConfigMapKeyRef.Key != kv[1] {
					t.Errorf("%s env = %+v", kv[0], e)
				}
			}
			for _, p := range []*corev1.Probe{ctr.LivenessProbe, ctr.ReadinessProbe, ctr.StartupProbe} {
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.IntVal != EtcdMetricsPort {
					t.Errorf("etcd probe not on the metrics port: %+v", p)
				}
			}
			aff := s.Template.Spec.Affinity.PodAntiAffinity
			if len(aff.RequiredDuringSchedulingIgnoredDuringExecution) != 0 || len(aff.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
				t.Errorf("anti-affinity must be soft only: %+v", aff)
			}
		})
	}
	svc := EtcdService(resolveTC(t))
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("etcd Service must be headless and publish not-ready addresses: %+v", svc.Spec)
	}
}

func TestAPIServerDeploymentKonnectivity(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("konnectivity=%v", on), func(t *testing.T) {
			c := resolveTC(t, konnectivity(on), func(tc *v1alpha1.TenantCluster) { tc.Spec.APIServer.Replicas = ptrTo(int32(3)) })
			d, err := APIServerDeployment(c, mustConfigMap(t, c), nil)
			if err != nil {
				t.Fatal(err)
			}
			pod := d.Spec.Template.Spec
			names := []string{}
			for _, ctr := range pod.Containers {
				names = append(names, ctr.Name)
			}
			wantNames := []string{"kube-apiserver"}
			if on {
				wantNames = append(wantNames, "konnectivity-server")
			}
			if !reflect.DeepEqual(names, wantNames) {
				t.Errorf("containers = %v, want %v", names, wantNames)
			}
			hasUDS := slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == volumeKonnectivity })
			if hasUDS != on {
				t.Errorf("socket volume present=%v", hasUDS)
			}
			if on {
				for _, ctr := range pod.Containers {
					if !slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool {
						return m.Name == volumeKonnectivity && m.MountPath == path.Dir(konnectivitySocket)
					}) {
						t.Errorf("%s does not mount the socket directory", ctr.Name)
					}
				}
			}
			api := pod.Containers[0]
			hasEgress := slices.ContainsFunc(api.Args, func(a string) bool { return strings.HasPrefix(a, "--egress-selector-config-file=") })
			if hasEgress != on {
				t.Errorf("egress flag present=%v", hasEgress)
			}
			if *d.Spec.Replicas != 3 {
				t.Errorf("replicas = %d", *d.Spec.Replicas)
			}
			ru := d.Spec.Strategy.RollingUpdate
			if ru.MaxUnavailable.IntValue() != 0 || ru.MaxSurge.IntValue() != 1 {
				t.Errorf("rolling update = %+v, want maxUnavailable 0 maxSurge 1", ru)
			}
			rp := api.ReadinessProbe.HTTPGet
			if rp.Path != "/readyz" || rp.Scheme != corev1.URISchemeHTTPS || rp.Port.IntVal != 6443 {
				t.Errorf("readiness = %+v", rp)
			}
			// Probed every second (the first readiness probe waits for a
			// tick after startup), unready after the same 9 s as before.
			if p := api.ReadinessProbe; p.PeriodSeconds != 1 || p.PeriodSeconds*p.FailureThreshold != 9 {
				t.Errorf("readiness every %d s, unready after %d failures", p.PeriodSeconds, p.FailureThreshold)
			}
			if api.Image != "registry.example.com/k8s/kube-apiserver:v1.34.4" {
				t.Errorf("image = %s", api.Image)
			}
			if on && pod.Containers[1].Image != "registry.example.com/k8s/kas-network-proxy/proxy-server:v0.34.0" {
				t.Errorf("konnectivity image = %s", pod.Containers[1].Image)
			}
		})
	}
}

func TestImagesComeFromOptions(t *testing.T) {
	opts := testOptions()
	opts.Images.Registry = "mirror.local:5000/k8s"
	c := mustResolve(t, newTC(func(tc *v1alpha1.TenantCluster) { tc.Spec.Version = "v1.35.1" }), opts)
	sts, _ := EtcdStatefulSet(c, nil)
	kcm, _ := ControllerManagerDeployment(c, mustConfigMap(t, c), nil)
	sched, _ := SchedulerDeployment(c, mustConfigMap(t, c), nil)
	for got, want := range map[string]string{
		sts.Spec.Template.Spec.Containers[0].Image:   "mirror.local:5000/k8s/etcd:3.6.5-0",
		kcm.Spec.Template.Spec.Containers[0].Image:   "mirror.local:5000/k8s/kube-controller-manager:v1.35.1",
		sched.Spec.Template.Spec.Containers[0].Image: "mirror.local:5000/k8s/kube-scheduler:v1.35.1",
	} {
		if got != want {
			t.Errorf("image %s, want %s", got, want)
		}
	}
}

func TestLeaderElectedDeployments(t *testing.T) {
	c := resolveTC(t)
	kcm, err := ControllerManagerDeployment(c, mustConfigMap(t, c), nil)
	if err != nil {
		t.Fatal(err)
	}
	sched, err := SchedulerDeployment(c, mustConfigMap(t, c), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []*appsv1.Deployment{kcm, sched} {
		if *d.Spec.Replicas != 2 {
			t.Errorf("%s replicas = %d", d.Name, *d.Spec.Replicas)
		}
		if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--leader-elect=true") {
			t.Errorf("%s is not leader-elected", d.Name)
		}
	}
	if kcm.Name != "alpha-controller-manager" || sched.Name != "alpha-scheduler" {
		t.Errorf("names %s %s", kcm.Name, sched.Name)
	}
}

// workloadObjects builds the four control plane workloads of a tenant.
func workloadObjects(t *testing.T, c *Cluster, secrets SecretData) (*appsv1.StatefulSet, *appsv1.Deployment, *appsv1.Deployment, *appsv1.Deployment) {
	t.Helper()
	sts, err := EtcdStatefulSet(c, secrets)
	if err != nil {
		t.Fatal(err)
	}
	cm := mustConfigMap(t, c)
	api, err := APIServerDeployment(c, cm, secrets)
	if err != nil {
		t.Fatal(err)
	}
	kcm, err := ControllerManagerDeployment(c, cm, secrets)
	if err != nil {
		t.Fatal(err)
	}
	sched, err := SchedulerDeployment(c, cm, secrets)
	if err != nil {
		t.Fatal(err)
	}
	return sts, api, kcm, sched
}

// workloads returns every pod template of a tenant.
func workloads(t *testing.T, c *Cluster, secrets SecretData) map[string]corev1.PodTemplateSpec {
	t.Helper()
	sts, api, kcm, sched := workloadObjects(t, c, secrets)
	return map[string]corev1.PodTemplateSpec{
		"etcd": sts.Spec.Template, "apiserver": api.Spec.Template,
		"controller-manager": kcm.Spec.Template, "scheduler": sched.Spec.Template,
	}
}

func TestSecurityContexts(t *testing.T) {
	for name, tpl := range workloads(t, resolveTC(t), nil) {
		pod := tpl.Spec
		if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
			t.Errorf("%s: admin-cluster token mounted", name)
		}
		if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || *psc.RunAsUser == 0 {
			t.Errorf("%s: pod may run as root", name)
		}
		for _, ctr := range pod.Containers {
			sc := ctr.SecurityContext
			if sc == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("%s/%s: security context %+v", name, ctr.Name, sc)
			}
		}
	}
}

// TestFlagFilesAreMounted checks the builders against each other: every
// file a flag or a component kubeconfig names must be mounted into that
// container, from a volume that projects that exact key.
func TestFlagFilesAreMounted(t *testing.T) {
	for _, on := range []bool{true, false} {
		c := resolveTC(t, konnectivity(on))
		cm, err := ConfigMap(c)
		if err != nil {
			t.Fatal(err)
		}
		for name, tpl := range workloads(t, c, nil) {
			vols := map[string]corev1.Volume{}
			for _, v := range tpl.Spec.Volumes {
				vols[v.Name] = v
			}
			for _, ctr := range tpl.Spec.Containers {
				var files []string
				for _, a := range ctr.Args {
					_, v, _ := strings.Cut(a, "=")
					if strings.HasPrefix(v, "/etc/kubernetes/") || strings.HasPrefix(v, "/var/lib/etcd") {
						files = append(files, v)
					}
					// A kubeconfig's own file references must be mounted too.
					if strings.HasPrefix(v, configDir+"/") && strings.HasSuffix(v, ".kubeconfig") {
						kc, err := clientcmd.Load([]byte(cm.Data[path.Base(v)]))
						if err != nil {
							t.Fatalf("%s: %v", v, err)
						}
						for _, cl := range kc.Clusters {
							files = append(files, cl.CertificateAuthority)
						}
						for _, u := range kc.AuthInfos {
							files = append(files, u.ClientCertificate, u.ClientKey)
						}
					}
				}
				for _, f := range files {
					if !fileMounted(f, ctr, vols) {
						t.Errorf("konnectivity=%v %s/%s: %s is not mounted", on, name, ctr.Name, f)
					}
				}
			}
		}
	}
}

func fileMounted(file string, ctr corev1.Container, vols map[string]corev1.Volume) bool {
	for _, m := range ctr.VolumeMounts {
		rel, ok := strings.CutPrefix(file, m.MountPath+"/")
		if !ok {
			continue
		}
		if m.Name == volumeEtcdData || m.Name == volumeKonnectivity {
			return true
		}
		v, ok := vols[m.Name]
		if !ok {
			return false
		}
		var items []corev1.KeyToPath
		switch {
		case v.Secret != nil:
			items = v.Secret.Items
		case v.ConfigMap != nil:
			items = v.ConfigMap.Items
		}
		return slices.ContainsFunc(items, func(i corev1.KeyToPath) bool { return i.Path == rel })
	}
	return false
}

func TestCAKeyOnlyInControllerManager(t *testing.T) {
	for name, tpl := range workloads(t, resolveTC(t), nil) {
		for _, ca := range []PKIRole{RoleCA, RoleFrontProxyCA, RoleEtcdCA} {
			// A pod may mount a CA Secret twice (the controller manager:
			// its trust and its signing pair); the key in either counts.
			hasKey := false
			for _, v := range tpl.Spec.Volumes {
				if v.Secret != nil && v.Secret.SecretName == "alpha-"+string(ca) {
					hasKey = hasKey || slices.ContainsFunc(v.Secret.Items, func(i corev1.KeyToPath) bool { return i.Key == "tls.key" })
				}
			}
			if hasKey != (name == "controller-manager" && ca == RoleCA) {
				t.Errorf("%s mounts the %s private key: %v", name, ca, hasKey)
			}
		}
	}
}

func TestChecksumRollsOnlyAffectedPods(t *testing.T) {
	c := resolveTC(t)
	base := workloads(t, c, sampleSecrets())
	cases := []struct {
		name    string
		mutate  func(SecretData)
		changed []string
	}{
		{"scheduler cert renewed", func(d SecretData) { d["alpha-scheduler"]["tls.crt"] = []byte("new") }, []string{"scheduler"}},
		{"apiserver cert renewed", func(d SecretData) { d["alpha-apiserver"]["tls.crt"] = []byte("new") }, []string{"apiserver"}},
		{"cluster CA key changed", func(d SecretData) { d["alpha-ca"]["tls.key"] = []byte("new") }, []string{"controller-manager"}},
		{"cluster CA cert changed", func(d SecretData) { d["alpha-ca"]["tls.crt"] = []byte("new") }, []string{"apiserver", "controller-manager", "scheduler"}},
		{"etcd CA cert changed", func(d SecretData) { d["alpha-etcd-ca"]["tls.crt"] = []byte("new") }, []string{"apiserver", "etcd"}},
		{"etcd peer secret gone", func(d SecretData) { delete(d, "alpha-etcd-peer") }, []string{"etcd"}},
		{"encryption keys changed", func(d SecretData) {
			d["alpha-encryption-config"] = map[string][]byte{EncryptionConfigKey: []byte("new")}
		}, []string{"apiserver"}},
		{"unmounted key changed", func(d SecretData) { d["alpha-apiserver"]["ca.crt"] = []byte("new") }, nil},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			d := sampleSecrets()
			tt.mutate(d)
			for name, tpl := range workloads(t, c, d) {
				changed := tpl.Annotations[v1alpha1.AnnotationChecksum] != base[name].Annotations[v1alpha1.AnnotationChecksum]
				if changed != slices.Contains(tt.changed, name) {
					t.Errorf("%s checksum changed=%v", name, changed)
				}
			}
		})
	}
	t.Run("admission config change rolls apiserver", func(t *testing.T) {
		c2 := resolveTC(t, func(tc *v1alpha1.TenantCluster) { tc.Spec.PodSecurity.Enforce = "restricted" })
		got := workloads(t, c2, sampleSecrets())
		if got["apiserver"].Annotations[v1alpha1.AnnotationChecksum] == base["apiserver"].Annotations[v1alpha1.AnnotationChecksum] {
			t.Error("apiserver checksum ignores the admission configuration")
		}
		if got["scheduler"].Annotations[v1alpha1.AnnotationChecksum] != base["scheduler"].Annotations[v1alpha1.AnnotationChecksum] {
			t.Error("scheduler checksum depends on the admission configuration")
		}
	})
}

func TestAPIServerServiceExpose(t *testing.T) {
	cases := []struct {
		name         string
		expose       v1alpha1.APIServerExpose
		konnectivity bool
		wantType     corev1.ServiceType
		wantPorts    []int32
		wantExternal []string
	}{
		{"default load balancer", v1alpha1.APIServerExpose{}, true, corev1.ServiceTypeLoadBalancer, []int32{6443, 8132}, nil},
		{"node port", v1alpha1.APIServerExpose{Type: v1alpha1.ExposeNodePort}, true, corev1.ServiceTypeNodePort, []int32{6443, 8132}, nil},
		{"external IP custom port", v1alpha1.APIServerExpose{Type: v1alpha1.ExposeExternalIP, ExternalIP: "192.0.2.8", Port: 443}, true,
			corev1.ServiceTypeClusterIP, []int32{443, 6443, 8132}, []string{"192.0.2.8"}},
		{"node port custom port", v1alpha1.APIServerExpose{Type: v1alpha1.ExposeNodePort, Port: 443}, false,
			corev1.ServiceTypeNodePort, []int32{443}, nil},
		{"no konnectivity", v1alpha1.APIServerExpose{Type: v1alpha1.ExposeLoadBalancer}, false, corev1.ServiceTypeLoadBalancer, []int32{6443}, nil},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			c := resolveTC(t, konnectivity(tt.konnectivity), func(tc *v1alpha1.TenantCluster) { tc.Spec.APIServer.Expose = tt.expose })
			svc := APIServerService(c)
			if svc.Spec.Type != tt.wantType {
				t.Errorf("type = %s, want %s", svc.Spec.Type, tt.wantType)
			}
			var ports []int32
			for _, p := range svc.Spec.Ports {
				ports = append(ports, p.Port)
			}
			if !reflect.DeepEqual(ports, tt.wantPorts) {
				t.Errorf("ports = %v, want %v", ports, tt.wantPorts)
			}
			if !reflect.DeepEqual(svc.Spec.ExternalIPs, tt.wantExternal) {
				t.Errorf("externalIPs = %v, want %v", svc.Spec.ExternalIPs, tt.wantExternal)
			}
			// Target ports are named and must exist in the API server pod.
			d, err := APIServerDeployment(c, mustConfigMap(t, c), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range svc.Spec.Ports {
				found := false
				for _, ctr := range d.Spec.Template.Spec.Containers {
					found = found || slices.ContainsFunc(ctr.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == p.TargetPort.StrVal })
				}
				if !found {
					t.Errorf("service port %s targets %q, which no container exposes", p.Name, p.TargetPort.StrVal)
				}
			}
			if !reflect.DeepEqual(svc.Spec.Selector, d.Spec.Selector.MatchLabels) {
				t.Errorf("service selector %v does not match the deployment %v", svc.Spec.Selector, d.Spec.Selector.MatchLabels)
			}
		})
	}
}

func TestTenantRBAC(t *testing.T) {
	for _, on := range []bool{true, false} {
		bindings := TenantRBAC(resolveTC(t, konnectivity(on)))
		got := map[string]string{}
		for _, b := range bindings {
			got[b.Subjects[0].Name] = b.RoleRef.Name
		}
		want := map[string]string{GroupClusterAdmins: "cluster-admin", UserKubeletClient: "system:kubelet-api-admin"}
		if on {
			want[UserKonnectivityServer] = "system:auth-delegator"
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("konnectivity=%v: bindings %v, want %v", on, got, want)
		}
	}
}

func TestPodDisruptionBudgets(t *testing.T) {
	cases := []struct {
		etcd, api int32
		// members is EtcdMembers during a membership change, 0: none.
		members int32
		want    []string
	}{
		{3, 2, 0, []string{"alpha-etcd", "alpha-apiserver"}},
		{1, 2, 0, []string{"alpha-apiserver"}},
		{1, 1, 0, nil},
		// The members running now decide, not the spec: the last member
		// of a shrink gets no budget, the second of a grow gets one.
		{1, 1, 2, []string{"alpha-etcd"}},
		{3, 1, 1, nil},
	}
	for _, tt := range cases {
		t.Run(fmt.Sprintf("etcd=%d members=%d api=%d", tt.etcd, tt.members, tt.api), func(t *testing.T) {
			c := resolveTC(t, func(tc *v1alpha1.TenantCluster) {
				tc.Spec.Etcd.Replicas = tt.etcd
				tc.Spec.APIServer.Replicas = ptrTo(tt.api)
			})
			if tt.members != 0 {
				c.EtcdMembers = tt.members
			}
			var names []string
			for _, p := range PodDisruptionBudgets(c) {
				names = append(names, p.Name)
				if p.Spec.MaxUnavailable.IntValue() != 1 {
					t.Errorf("%s maxUnavailable = %s", p.Name, p.Spec.MaxUnavailable.String())
				}
			}
			if !reflect.DeepEqual(names, tt.want) {
				t.Errorf("budgets %v, want %v", names, tt.want)
			}
		})
	}
	sts, _ := EtcdStatefulSet(resolveTC(t), nil)
	pdbs := PodDisruptionBudgets(resolveTC(t))
	var etcdPDB *policyv1.PodDisruptionBudget
	for _, p := range pdbs {
		if p.Name == "alpha-etcd" {
			etcdPDB = p
		}
	}
	if etcdPDB == nil || !reflect.DeepEqual(etcdPDB.Spec.Selector.MatchLabels, sts.Spec.Selector.MatchLabels) {
		t.Errorf("etcd budget does not select the etcd pods")
	}
}

// TestWorkloadsHashTheGivenConfigMap: the pod-template checksum covers the
// ConfigMap the caller passes (the one it applied), not a copy the builder
// makes, and a workload refuses to be built without it or with another
// tenant's.
func TestWorkloadsHashTheGivenConfigMap(t *testing.T) {
	c := resolveTC(t)
	builders := map[string]func(*Cluster, *corev1.ConfigMap, SecretData) (*appsv1.Deployment, error){
		"apiserver": APIServerDeployment, "controller-manager": ControllerManagerDeployment, "scheduler": SchedulerDeployment,
	}
	for name, b := range builders {
		t.Run(name, func(t *testing.T) {
			cm := mustConfigMap(t, c)
			before, err := b(c, cm, nil)
			if err != nil {
				t.Fatal(err)
			}
			changed := cm.DeepCopy()
			for k := range changed.Data {
				changed.Data[k] += "# edited\n"
			}
			after, err := b(c, changed, nil)
			if err != nil {
				t.Fatal(err)
			}
			if before.Spec.Template.Annotations[v1alpha1.AnnotationChecksum] == after.Spec.Template.Annotations[v1alpha1.AnnotationChecksum] {
				t.Error("checksum ignores the ConfigMap passed in")
			}
			if _, err := b(c, nil, nil); err == nil {
				t.Error("built without a ConfigMap")
			}
			other := cm.DeepCopy()
			other.Name = "beta-control-plane"
			if _, err := b(c, other, nil); err == nil {
				t.Error("built with another tenant's ConfigMap")
			}
		})
	}
}

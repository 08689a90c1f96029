package desired

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func TestAPIServerFlagDefaults(t *testing.T) {
	c := resolveTC(t, func(tc *v1alpha1.TenantCluster) {
		tc.Spec.Network.ClusterDomain = "tenant.example"
		tc.Spec.Network.ServiceCIDR = "10.32.0.0/16"
		tc.Spec.Etcd.Replicas = 1
	})
	flags, err := APIServerFlags(c)
	if err != nil {
		t.Fatal(err)
	}
	got := flagMap(t, flags)
	want := map[string]string{
		"authorization-mode":               "Node,RBAC",
		"enable-bootstrap-token-auth":      "true",
		"enable-admission-plugins":         "NodeRestriction",
		"admission-control-config-file":    "/etc/kubernetes/config/admission-configuration.json",
		"egress-selector-config-file":      "/etc/kubernetes/config/egress-selector-configuration.json",
		"encryption-provider-config":       "/etc/kubernetes/pki/encryption-config/encryption-configuration.json",
		"service-account-issuer":           "https://kubernetes.default.svc.tenant.example",
		"service-account-key-file":         "/etc/kubernetes/pki/service-account/tls.key",
		"service-account-signing-key-file": "/etc/kubernetes/pki/service-account/tls.key",
		"service-cluster-ip-range":         "10.32.0.0/16",
		"client-ca-file":                   "/etc/kubernetes/pki/ca/tls.crt",
		"tls-cert-file":                    "/etc/kubernetes/pki/apiserver/tls.crt",
		"tls-private-key-file":             "/etc/kubernetes/pki/apiserver/tls.key",
		"kubelet-client-certificate":       "/etc/kubernetes/pki/apiserver-kubelet-client/tls.crt",
		"kubelet-client-key":               "/etc/kubernetes/pki/apiserver-kubelet-client/tls.key",
		"proxy-client-cert-file":           "/etc/kubernetes/pki/front-proxy-client/tls.crt",
		"proxy-client-key-file":            "/etc/kubernetes/pki/front-proxy-client/tls.key",
		"requestheader-client-ca-file":     "/etc/kubernetes/pki/front-proxy-ca/tls.crt",
		"requestheader-allowed-names":      "front-proxy-client",
		"etcd-cafile":                      "/etc/kubernetes/pki/etcd-ca/tls.crt",
		"etcd-certfile":                    "/etc/kubernetes/pki/apiserver-etcd-client/tls.crt",
		"etcd-keyfile":                     "/etc/kubernetes/pki/apiserver-etcd-client/tls.key",
		"etcd-servers":                     "https://alpha-etcd-0.alpha-etcd.tenants.svc.cluster.local:2379",
		"secure-port":                      "6443",
		"kubelet-certificate-authority":    "/etc/kubernetes/pki/ca/tls.crt",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("--%s = %q, want %q", k, got[k], v)
		}
	}
	if _, ok := got["advertise-address"]; ok {
		t.Errorf("--advertise-address set although no external IP is known")
	}
}

func TestFlagsAreSortedAndDeterministic(t *testing.T) {
	// Many keys so that Go's randomized map iteration would show up.
	mk := func() *v1alpha1.TenantCluster {
		extra := map[string]string{}
		for i := range 200 {
			extra[fmt.Sprintf("feature-%03d", i)] = fmt.Sprint(i)
		}
		return newTC(func(tc *v1alpha1.TenantCluster) {
			tc.Spec.APIServer.ExtraArgs = extra
			tc.Spec.ControllerManager.ExtraArgs = extra
			tc.Spec.Scheduler.ExtraArgs = extra
		})
	}
	builders := map[string]func(*Cluster) ([]string, error){
		"apiserver":          APIServerFlags,
		"controller-manager": ControllerManagerFlags,
		"scheduler":          SchedulerFlags,
		"konnectivity":       KonnectivityServerFlags,
		"etcd":               func(c *Cluster) ([]string, error) { return EtcdFlags(c) },
	}
	for name, b := range builders {
		t.Run(name, func(t *testing.T) {
			first, err := b(mustResolve(t, mk(), testOptions()))
			if err != nil {
				t.Fatal(err)
			}
			keys := make([]string, 0, len(first))
			for _, f := range first {
				k, _, _ := strings.Cut(f, "=")
				keys = append(keys, k)
			}
			if !slices.IsSorted(keys) {
				t.Errorf("flags not sorted: %v", first)
			}
			for range 20 {
				again, err := b(mustResolve(t, mk(), testOptions()))
				if err != nil {
					t.Fatal(err)
				}
				if strings.Join(again, "\n") != strings.Join(first, "\n") {
					t.Fatalf("flags differ between runs:\n%v\n%v", first, again)
				}
			}
		})
	}
}

func TestExtraArgsPrecedence(t *testing.T) {
	c := resolveTC(t, func(tc *v1alpha1.TenantCluster) {
		tc.Spec.APIServer.ExtraArgs = map[string]string{
			"profiling":                "true",              // overrides a default
			"--v":                      "4",                 // leading dashes accepted
			"audit-log-maxage":         "7",                 // a flag kubefarm does not set
			"authorization-mode":       "Node,RBAC,Webhook", // constrained, still valid
			"enable-admission-plugins": "NodeRestriction,AlwaysPullImages",
		}
	})
	flags, err := APIServerFlags(c)
	if err != nil {
		t.Fatal(err)
	}
	got := flagMap(t, flags)
	for k, v := range map[string]string{
		"profiling": "true", "v": "4", "audit-log-maxage": "7",
		"authorization-mode": "Node,RBAC,Webhook", "enable-admission-plugins": "NodeRestriction,AlwaysPullImages",
	} {
		if got[k] != v {
			t.Errorf("--%s = %q, want user value %q", k, got[k], v)
		}
	}
}

func TestProtectedFlagConflicts(t *testing.T) {
	type builder func(*Cluster) ([]string, error)
	cases := []struct {
		name    string
		set     func(*v1alpha1.TenantCluster, map[string]string)
		b       builder
		args    map[string]string
		wantErr []string // substrings; empty means success
	}{
		{"client CA", apiArgs, APIServerFlags, map[string]string{"client-ca-file": "/x"},
			[]string{"spec.apiServer.extraArgs[client-ca-file]", "Forbidden"}},
		{"tls cert with dashes", apiArgs, APIServerFlags, map[string]string{"--tls-cert-file": "/x"},
			[]string{"spec.apiServer.extraArgs[--tls-cert-file]"}},
		{"etcd servers", apiArgs, APIServerFlags, map[string]string{"etcd-servers": "http://evil:2379"},
			[]string{"spec.apiServer.extraArgs[etcd-servers]"}},
		{"service account prefix", apiArgs, APIServerFlags, map[string]string{"service-account-issuer": "https://x"},
			[]string{"spec.apiServer.extraArgs[service-account-issuer]"}},
		{"service account jwks", apiArgs, APIServerFlags, map[string]string{"service-account-jwks-uri": "https://x"},
			[]string{"spec.apiServer.extraArgs[service-account-jwks-uri]"}},
		{"requestheader prefix", apiArgs, APIServerFlags, map[string]string{"requestheader-allowed-names": ""},
			[]string{"spec.apiServer.extraArgs[requestheader-allowed-names]"}},
		{"token file", apiArgs, APIServerFlags, map[string]string{"token-auth-file": "/t"},
			[]string{"spec.apiServer.extraArgs[token-auth-file]"}},
		{"encryption config", apiArgs, APIServerFlags, map[string]string{"encryption-provider-config": "/plain.yaml"},
			[]string{"spec.apiServer.extraArgs[encryption-provider-config]", "Forbidden"}},
		{"encryption reload", apiArgs, APIServerFlags, map[string]string{"--encryption-provider-config-automatic-reload": "true"},
			[]string{"spec.apiServer.extraArgs[--encryption-provider-config-automatic-reload]", "Forbidden"}},
		{"authz without Node", apiArgs, APIServerFlags, map[string]string{"authorization-mode": "RBAC"},
			[]string{"spec.apiServer.extraArgs[authorization-mode]", "must contain Node,RBAC"}},
		{"authz always allow", apiArgs, APIServerFlags, map[string]string{"authorization-mode": "AlwaysAllow,Node,RBAC"},
			[]string{"must not contain AlwaysAllow"}},
		{"authz config", apiArgs, APIServerFlags, map[string]string{"authorization-config": "/a"},
			[]string{"spec.apiServer.extraArgs[authorization-config]"}},
		{"admission without NodeRestriction", apiArgs, APIServerFlags, map[string]string{"enable-admission-plugins": "AlwaysPullImages"},
			[]string{"spec.apiServer.extraArgs[enable-admission-plugins]", "NodeRestriction"}},
		{"disable PodSecurity", apiArgs, APIServerFlags, map[string]string{"disable-admission-plugins": "PodSecurity"},
			[]string{"spec.apiServer.extraArgs[disable-admission-plugins]"}},
		{"secure port", apiArgs, APIServerFlags, map[string]string{"secure-port": "443"},
			[]string{"spec.apiServer.extraArgs[secure-port]"}},
		{"egress file even with konnectivity off", func(tc *v1alpha1.TenantCluster, a map[string]string) {
			tc.Spec.APIServer.ExtraArgs = a
			off := false
			tc.Spec.Konnectivity.Enabled = &off
		}, APIServerFlags, map[string]string{"egress-selector-config-file": "/e"},
			[]string{"spec.apiServer.extraArgs[egress-selector-config-file]"}},
		{"same flag twice", apiArgs, APIServerFlags, map[string]string{"v": "2", "--v": "4"},
			[]string{"Duplicate value"}},
		{"bad key", apiArgs, APIServerFlags, map[string]string{"v=2": ""},
			[]string{"spec.apiServer.extraArgs[v=2]", "flag name"}},
		{"every conflict reported", apiArgs, APIServerFlags, map[string]string{"client-ca-file": "/x", "tls-private-key-file": "/y", "v": "2"},
			[]string{"extraArgs[client-ca-file]", "extraArgs[tls-private-key-file]"}},

		{"kcm signing key", kcmArgs, ControllerManagerFlags, map[string]string{"cluster-signing-key-file": "/k"},
			[]string{"spec.controllerManager.extraArgs[cluster-signing-key-file]"}},
		{"kcm per-signer file", kcmArgs, ControllerManagerFlags, map[string]string{"cluster-signing-kubelet-serving-cert-file": "/k"},
			[]string{"spec.controllerManager.extraArgs[cluster-signing-kubelet-serving-cert-file]"}},
		{"kcm signing duration allowed", kcmArgs, ControllerManagerFlags, map[string]string{"cluster-signing-duration": "720h"}, nil},
		{"kcm leader election off", kcmArgs, ControllerManagerFlags, map[string]string{"leader-elect": "false"},
			[]string{"spec.controllerManager.extraArgs[leader-elect]", "must be true"}},
		{"kcm leader election on", kcmArgs, ControllerManagerFlags, map[string]string{"leader-elect": "true"}, nil},
		{"kcm drops bootstrapsigner", kcmArgs, ControllerManagerFlags, map[string]string{"controllers": "*,-bootstrapsigner,tokencleaner"},
			[]string{"spec.controllerManager.extraArgs[controllers]"}},
		{"kcm shared credentials", kcmArgs, ControllerManagerFlags, map[string]string{"use-service-account-credentials": "false"},
			[]string{"spec.controllerManager.extraArgs[use-service-account-credentials]"}},
		{"kcm extra controllers", kcmArgs, ControllerManagerFlags, map[string]string{"controllers": "*,bootstrapsigner,tokencleaner,-ttl"}, nil},

		{"scheduler config file", schedArgs, SchedulerFlags, map[string]string{"config": "/c"},
			[]string{"spec.scheduler.extraArgs[config]"}},
		{"scheduler kubeconfig", schedArgs, SchedulerFlags, map[string]string{"kubeconfig": "/c"},
			[]string{"spec.scheduler.extraArgs[kubeconfig]"}},
		{"scheduler verbosity", schedArgs, SchedulerFlags, map[string]string{"v": "3"}, nil},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTC()
			tt.set(tc, tt.args)
			flags, err := tt.b(mustResolve(t, tc, testOptions()))
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				got := flagMap(t, flags)
				for k, v := range tt.args {
					if got[strings.TrimLeft(k, "-")] != v {
						t.Errorf("--%s = %q, want %q", k, got[k], v)
					}
				}
				return
			}
			if err == nil {
				t.Fatalf("no error; flags: %v", flags)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func apiArgs(tc *v1alpha1.TenantCluster, a map[string]string) { tc.Spec.APIServer.ExtraArgs = a }
func kcmArgs(tc *v1alpha1.TenantCluster, a map[string]string) {
	tc.Spec.ControllerManager.ExtraArgs = a
}
func schedArgs(tc *v1alpha1.TenantCluster, a map[string]string) { tc.Spec.Scheduler.ExtraArgs = a }

func TestKonnectivityTogglesEgressFlag(t *testing.T) {
	for _, on := range []bool{true, false} {
		flags, err := APIServerFlags(resolveTC(t, konnectivity(on)))
		if err != nil {
			t.Fatal(err)
		}
		_, has := flagMap(t, flags)["egress-selector-config-file"]
		if has != on {
			t.Errorf("konnectivity=%v: egress-selector-config-file present=%v", on, has)
		}
	}
}

func TestAdvertiseAddress(t *testing.T) {
	cases := []struct {
		name, externalIP, observed, want string
	}{
		{"spec external IP", "192.0.2.1", "", "192.0.2.1"},
		{"observed LB IP", "", "198.51.100.2", "198.51.100.2"},
		{"observed LB hostname is not advertised", "", "lb.example.net", ""},
		{"unknown", "", "", ""},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			opts := testOptions()
			opts.ObservedExternalAddress = tt.observed
			c := mustResolve(t, newTC(func(tc *v1alpha1.TenantCluster) { tc.Spec.APIServer.Expose.ExternalIP = tt.externalIP }), opts)
			flags, err := APIServerFlags(c)
			if err != nil {
				t.Fatal(err)
			}
			if got := flagMap(t, flags)["advertise-address"]; got != tt.want {
				t.Errorf("--advertise-address = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestControllerManagerFlags(t *testing.T) {
	t.Run("with pod CIDR", func(t *testing.T) {
		flags, err := ControllerManagerFlags(resolveTC(t, func(tc *v1alpha1.TenantCluster) { tc.Spec.Network.PodCIDR = "10.244.0.0/16" }))
		if err != nil {
			t.Fatal(err)
		}
		got := flagMap(t, flags)
		for k, v := range map[string]string{
			"allocate-node-cidrs":              "true",
			"cluster-cidr":                     "10.244.0.0/16",
			"controllers":                      "*,bootstrapsigner,tokencleaner",
			"cluster-signing-cert-file":        "/etc/kubernetes/pki/ca-signer/tls.crt",
			"cluster-signing-key-file":         "/etc/kubernetes/pki/ca-signer/tls.key",
			"use-service-account-credentials":  "true",
			"service-account-private-key-file": "/etc/kubernetes/pki/service-account/tls.key",
			"root-ca-file":                     "/etc/kubernetes/pki/ca/tls.crt",
			"leader-elect":                     "true",
			"kubeconfig":                       "/etc/kubernetes/config/controller-manager.kubeconfig",
			"authentication-kubeconfig":        "/etc/kubernetes/config/controller-manager.kubeconfig",
			"authorization-kubeconfig":         "/etc/kubernetes/config/controller-manager.kubeconfig",
			"service-cluster-ip-range":         "10.96.0.0/12",
			"cluster-name":                     "alpha",
		} {
			if got[k] != v {
				t.Errorf("--%s = %q, want %q", k, got[k], v)
			}
		}
	})
	t.Run("without pod CIDR", func(t *testing.T) {
		flags, err := ControllerManagerFlags(resolveTC(t))
		if err != nil {
			t.Fatal(err)
		}
		got := flagMap(t, flags)
		for _, k := range []string{"allocate-node-cidrs", "cluster-cidr"} {
			if _, ok := got[k]; ok {
				t.Errorf("--%s set without a pod CIDR", k)
			}
		}
	})
}

func TestSchedulerFlags(t *testing.T) {
	flags, err := SchedulerFlags(resolveTC(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"--authentication-kubeconfig=/etc/kubernetes/config/scheduler.kubeconfig",
		"--authorization-kubeconfig=/etc/kubernetes/config/scheduler.kubeconfig",
		"--bind-address=0.0.0.0",
		"--kubeconfig=/etc/kubernetes/config/scheduler.kubeconfig",
		"--leader-elect=true",
		"--profiling=false",
	}
	if !reflect.DeepEqual(flags, want) {
		t.Errorf("scheduler flags:\n got %v\nwant %v", flags, want)
	}
}

func TestEtcdFlags(t *testing.T) {
	cases := []struct {
		replicas        int32
		state           EtcdClusterState
		wantInitial     string
		wantEtcdServers string
	}{
		{1, EtcdClusterNew,
			"alpha-etcd-0=https://alpha-etcd-0.alpha-etcd.tenants.svc.cluster.local:2380",
			"https://alpha-etcd-0.alpha-etcd.tenants.svc.cluster.local:2379"},
		{3, EtcdClusterExisting,
			"alpha-etcd-0=https://alpha-etcd-0.alpha-etcd.tenants.svc.cluster.local:2380," +
				"alpha-etcd-1=https://alpha-etcd-1.alpha-etcd.tenants.svc.cluster.local:2380," +
				"alpha-etcd-2=https://alpha-etcd-2.alpha-etcd.tenants.svc.cluster.local:2380",
			"https://alpha-etcd-0.alpha-etcd.tenants.svc.cluster.local:2379," +
				"https://alpha-etcd-1.alpha-etcd.tenants.svc.cluster.local:2379," +
				"https://alpha-etcd-2.alpha-etcd.tenants.svc.cluster.local:2379"},
	}
	for _, tt := range cases {
		t.Run(fmt.Sprintf("%d members %s", tt.replicas, tt.state), func(t *testing.T) {
			c := resolveTC(t, func(tc *v1alpha1.TenantCluster) { tc.Spec.Etcd.Replicas = tt.replicas })
			flags, err := EtcdFlags(c)
			if err != nil {
				t.Fatal(err)
			}
			got := flagMap(t, flags)
			want := map[string]string{
				"name":                        "$(POD_NAME)",
				"initial-advertise-peer-urls": "https://$(POD_NAME).alpha-etcd.tenants.svc.cluster.local:2380",
				"advertise-client-urls":       "https://$(POD_NAME).alpha-etcd.tenants.svc.cluster.local:2379",
				"client-cert-auth":            "true",
				"peer-client-cert-auth":       "true",
				"trusted-ca-file":             "/etc/kubernetes/pki/etcd-ca/tls.crt",
				"peer-trusted-ca-file":        "/etc/kubernetes/pki/etcd-ca/tls.crt",
				"cert-file":                   "/etc/kubernetes/pki/etcd-server/tls.crt",
				"peer-cert-file":              "/etc/kubernetes/pki/etcd-peer/tls.crt",
				"listen-metrics-urls":         "http://0.0.0.0:2381",
				"data-dir":                    "/var/lib/etcd/data",
				"heartbeat-interval":          "250",
				"election-timeout":            "2500",
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("--%s = %q, want %q", k, got[k], v)
				}
			}
			// The state is the ConfigMap's, read from the environment.
			// So is the initial cluster.
			for _, f := range []string{"initial-cluster-state", "initial-cluster"} {
				if v, ok := got[f]; ok {
					t.Errorf("--%s=%s is a flag: changing it would roll every member", f, v)
				}
			}
			cm, err := EtcdStateConfigMap(c, tt.state)
			if err != nil {
				t.Fatal(err)
			}
			if cm.Name != "alpha-etcd-state" || cm.Namespace != "tenants" || cm.Data[EtcdStateKey] != string(tt.state) ||
				cm.Data[EtcdInitialClusterKey] != tt.wantInitial {
				t.Errorf("etcd state ConfigMap %s/%s %v", cm.Namespace, cm.Name, cm.Data)
			}
			api, err := APIServerFlags(c)
			if err != nil {
				t.Fatal(err)
			}
			if got := flagMap(t, api)["etcd-servers"]; got != tt.wantEtcdServers {
				t.Errorf("apiserver --etcd-servers = %q, want %q", got, tt.wantEtcdServers)
			}
		})
	}
	if _, err := EtcdStateConfigMap(resolveTC(t), "install"); err == nil {
		t.Error("EtcdStateConfigMap accepted an unknown initial cluster state")
	}
}

func TestKonnectivityServerFlags(t *testing.T) {
	c := resolveTC(t, func(tc *v1alpha1.TenantCluster) { tc.Spec.APIServer.Replicas = ptrTo(int32(3)) })
	flags, err := KonnectivityServerFlags(c)
	if err != nil {
		t.Fatal(err)
	}
	got := flagMap(t, flags)
	for k, v := range map[string]string{
		"uds-name":                "/etc/kubernetes/konnectivity-server/konnectivity-server.socket",
		"mode":                    "grpc",
		"server-port":             "0",
		"agent-port":              "8132",
		"admin-port":              "8133",
		"health-port":             "8134",
		"cluster-cert":            "/etc/kubernetes/pki/konnectivity-server/tls.crt",
		"cluster-key":             "/etc/kubernetes/pki/konnectivity-server/tls.key",
		"authentication-audience": "system:konnectivity-server",
		"kubeconfig":              "/etc/kubernetes/config/konnectivity-server.kubeconfig",
		"server-count":            "3",
	} {
		if got[k] != v {
			t.Errorf("--%s = %q, want %q", k, got[k], v)
		}
	}
}

func TestEtcdQuotaFollowsVolume(t *testing.T) {
	cases := []struct {
		size string
		want string
	}{
		{"2Gi", "1610612736"},
		{"100Mi", "268435456"},  // floor
		{"100Gi", "8589934592"}, // etcd's practical maximum
	}
	for _, tt := range cases {
		t.Run(tt.size, func(t *testing.T) {
			c := resolveTC(t, func(tc *v1alpha1.TenantCluster) { q := resource.MustParse(tt.size); tc.Spec.Etcd.StorageSize = &q })
			flags, err := EtcdFlags(c)
			if err != nil {
				t.Fatal(err)
			}
			if got := flagMap(t, flags)["quota-backend-bytes"]; got != tt.want {
				t.Errorf("--quota-backend-bytes = %s, want %s", got, tt.want)
			}
		})
	}
}

package tenantcluster

import (
	"context"
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
)

func cert(gen, readyGen int64, status cmmeta.ConditionStatus) *cmapi.Certificate {
	c := &cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Generation: gen}}
	if status != "" {
		c.Status.Conditions = []cmapi.CertificateCondition{{Type: cmapi.CertificateConditionReady, Status: status, ObservedGeneration: readyGen}}
	}
	return c
}

func TestCertificatesCondition(t *testing.T) {
	for _, tc := range []struct {
		name        string
		certs       []namedCertificate
		wantReady   bool
		wantMessage string
	}{
		{"all issued", []namedCertificate{{"a", cert(1, 1, cmmeta.ConditionTrue)}, {"b", cert(2, 2, cmmeta.ConditionTrue)}}, true, "all 2 certificates are issued"},
		{"one not ready", []namedCertificate{{"a", cert(1, 1, cmmeta.ConditionTrue)}, {"b", cert(1, 1, cmmeta.ConditionFalse)}}, false, "1 of 2 certificates not ready: b"},
		{"no condition yet", []namedCertificate{{"a", cert(1, 0, "")}, {"b", cert(1, 0, "")}}, false, "2 of 2 certificates not ready: a, b"},
		// Ready for generation 1 says nothing about the SANs of generation 2.
		{"ready for an older spec", []namedCertificate{{"a", cert(2, 1, cmmeta.ConditionTrue)}}, false, "1 of 1 certificates not ready: a"},
		{"unreadable", []namedCertificate{{"a", nil}}, false, "1 of 1 certificates not ready: a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := certificatesCondition(tc.certs)
			if ok != tc.wantReady || c.Message != tc.wantMessage {
				t.Errorf("got (%v, %q), want (%v, %q)", ok, c.Message, tc.wantReady, tc.wantMessage)
			}
			wantStatus := metav1.ConditionFalse
			if tc.wantReady {
				wantStatus = metav1.ConditionTrue
			}
			if c.Type != v1alpha1.ConditionCertificatesReady || c.Status != wantStatus {
				t.Errorf("condition %s=%s, want CertificatesReady=%s", c.Type, c.Status, wantStatus)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func sts(replicas, gen, observed, ready int32, state desired.EtcdClusterState) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: int64(gen)}}
	s.Spec.Replicas = ptr(replicas)
	s.Status.ObservedGeneration = int64(observed)
	s.Status.ReadyReplicas = ready
	if state != "" {
		s.Spec.Template.Spec.Containers = []corev1.Container{{Name: desired.ComponentEtcd, Args: []string{"--data-dir=/x", "--initial-cluster-state=" + string(state)}}}
	}
	return s
}

func TestEtcdCondition(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sts     *appsv1.StatefulSet
		want    bool
		message string
	}{
		{"missing", nil, false, "does not exist"},
		{"no controller has seen it", sts(3, 1, 0, 0, ""), false, "0/3 etcd members ready; no pods running yet for generation 1"},
		{"quorum but not all", sts(3, 1, 1, 2, ""), false, "2/3 etcd members ready"},
		{"all ready", sts(3, 1, 1, 3, ""), true, "3/3 etcd members ready"},
		{"ready counts of an older generation", sts(3, 2, 1, 3, ""), false, "generation 2"},
		{"single member", sts(1, 4, 4, 1, ""), true, "1/1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := etcdCondition(tc.sts)
			if ok != tc.want || !strings.Contains(c.Message, tc.message) {
				t.Errorf("got (%v, %q), want (%v, containing %q)", ok, c.Message, tc.want, tc.message)
			}
			if c.Type != v1alpha1.ConditionEtcdReady {
				t.Errorf("type %s", c.Type)
			}
			if !ok && c.Reason != v1alpha1.ReasonMembersNotReady {
				t.Errorf("reason %s", c.Reason)
			}
		})
	}
}

func deploy(replicas int32, gen, observed int64, total, updated, available int32) *appsv1.Deployment {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: gen}}
	d.Spec.Replicas = ptr(replicas)
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: total, UpdatedReplicas: updated, AvailableReplicas: available}
	return d
}

func TestDeploymentConditions(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		d                    *appsv1.Deployment
		available, rolledOut bool
	}{
		{"missing", nil, false, false},
		{"not observed", deploy(2, 1, 0, 0, 0, 0), false, false},
		{"one of two", deploy(2, 1, 1, 2, 2, 1), false, false},
		{"complete", deploy(2, 1, 1, 2, 2, 2), true, true},
		// maxSurge: a third pod of the new template is starting, two old
		// ones still serve. Available, but not every pod runs the new spec.
		{"rolling", deploy(2, 2, 2, 3, 1, 2), true, false},
		{"new generation not observed", deploy(2, 3, 2, 2, 2, 2), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, msg := deploymentAvailable(tc.d, "x"); got != tc.available {
				t.Errorf("available = %v (%s), want %v", got, msg, tc.available)
			}
			if got := rolledOut(tc.d); got != tc.rolledOut {
				t.Errorf("rolledOut = %v, want %v", got, tc.rolledOut)
			}
			c, ok := apiServerCondition(tc.d)
			if ok != tc.available || c.Type != v1alpha1.ConditionAPIServerReady {
				t.Errorf("apiServerCondition = %+v", c)
			}
		})
	}
}

func TestReadyCondition(t *testing.T) {
	ok := func(typ string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Message: "fine"}
	}
	bad := func(typ string) metav1.Condition { return notReady(typ, "R", "broken") }
	for _, tc := range []struct {
		name       string
		conds      []metav1.Condition
		extra      []string
		wantStatus metav1.ConditionStatus
		wantReason string
		wantMsg    string
	}{
		{"all true", []metav1.Condition{ok("A"), ok("B")}, nil, metav1.ConditionTrue, v1alpha1.ReasonControlPlaneReady, "the control plane is running"},
		{"first false names the reason, message lists all", []metav1.Condition{ok("A"), bad("B"), bad("C")}, []string{"x"}, metav1.ConditionFalse, "BFalse", "B: broken; C: broken; x"},
		{"only extra", []metav1.Condition{ok("A")}, []string{"endpoint pending"}, metav1.ConditionFalse, v1alpha1.ReasonNotAvailable, "endpoint pending"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := readyCondition(tc.conds, tc.extra)
			if c.Type != v1alpha1.ConditionReady || c.Status != tc.wantStatus || c.Reason != tc.wantReason || c.Message != tc.wantMsg {
				t.Errorf("got %s=%s %s %q", c.Type, c.Status, c.Reason, c.Message)
			}
		})
	}
}

func TestDecideEtcdState(t *testing.T) {
	cm := func(state desired.EtcdClusterState) *corev1.ConfigMap {
		return &corev1.ConfigMap{Data: map[string]string{desired.EtcdStateKey: string(state)}}
	}
	for _, tc := range []struct {
		name    string
		sts     *appsv1.StatefulSet
		state   *corev1.ConfigMap
		volumes int
		want    desired.EtcdClusterState
	}{
		{"first install", nil, nil, 0, desired.EtcdClusterNew},
		{"recreated over retained volumes", nil, nil, 3, desired.EtcdClusterExisting},
		{"bootstrapping, nobody ready yet", sts(3, 1, 1, 0, ""), cm(desired.EtcdClusterNew), 0, desired.EtcdClusterNew},
		{"bootstrapped: a member is ready", sts(3, 1, 1, 1, ""), cm(desired.EtcdClusterNew), 0, desired.EtcdClusterExisting},
		{"existing stays existing with no member ready", sts(3, 2, 2, 0, ""), cm(desired.EtcdClusterExisting), 0, desired.EtcdClusterExisting},
		{"existing stays existing with no StatefulSet", nil, cm(desired.EtcdClusterExisting), 0, desired.EtcdClusterExisting},
		{"an earlier kubefarm's flag says existing", sts(3, 2, 2, 0, desired.EtcdClusterExisting), nil, 0, desired.EtcdClusterExisting},
		{"an earlier kubefarm's flag says new, nobody ready", sts(3, 1, 1, 0, desired.EtcdClusterNew), nil, 0, desired.EtcdClusterNew},
		{"StatefulSet without an etcd container", sts(3, 1, 1, 0, ""), nil, 3, desired.EtcdClusterNew},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideEtcdState(tc.sts, tc.state, tc.volumes); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestEndpoint(t *testing.T) {
	lb := func(in ...corev1.LoadBalancerIngress) *corev1.Service {
		s := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 6443, NodePort: 31000}}}}
		s.Status.LoadBalancer.Ingress = in
		return s
	}
	np := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{
		{Name: "https", Port: 6443, NodePort: 31443}, {Name: "konnectivity", Port: 8132, NodePort: 31132}}}}
	ext := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{{Port: 443}}}}
	for _, tc := range []struct {
		name     string
		svc      *corev1.Service
		nodeAddr string
		// address is the external address the builders get: observed
		// unless spec.apiServer.expose.externalIP sets it.
		address     string
		servicePort int32
		wantObs     string
		wantURL     string
	}{
		{"no Service yet", nil, "", "", 6443, "", ""},
		{"load balancer pending", lb(), "", "", 6443, "", ""},
		{"load balancer IP", lb(corev1.LoadBalancerIngress{IP: "192.0.2.10"}), "", "192.0.2.10", 6443, "192.0.2.10", "https://192.0.2.10:6443"},
		{"load balancer hostname", lb(corev1.LoadBalancerIngress{Hostname: "lb.example.com"}), "", "lb.example.com", 6443, "lb.example.com", "https://lb.example.com:6443"},
		{"load balancer IPv6", lb(corev1.LoadBalancerIngress{IP: "2001:db8::1"}), "", "2001:db8::1", 6443, "2001:db8::1", "https://[2001:db8::1]:6443"},
		{"node port uses the node port", np, "198.51.100.7", "198.51.100.7", 6443, "198.51.100.7", "https://198.51.100.7:31443"},
		{"node port, no ready node", np, "", "", 6443, "", ""},
		{"external IP uses the Service port", ext, "", "203.0.113.5", 443, "", "https://203.0.113.5:443"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := observedAddress(tc.svc, tc.nodeAddr); got != tc.wantObs {
				t.Errorf("observedAddress = %q, want %q", got, tc.wantObs)
			}
			if got := endpointURL(tc.address, endpointPort(tc.svc, tc.servicePort)); got != tc.wantURL {
				t.Errorf("endpoint = %q, want %q", got, tc.wantURL)
			}
		})
	}
}

func TestNodeAddress(t *testing.T) {
	node := func(name string, ready bool, addrs ...corev1.NodeAddress) corev1.Node {
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}, Addresses: addrs}}
	}
	in := func(a string) corev1.NodeAddress { return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a} }
	ex := func(a string) corev1.NodeAddress { return corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: a} }
	for _, tc := range []struct {
		name  string
		nodes []corev1.Node
		want  string
	}{
		{"none", nil, ""},
		{"first ready by name, not list order", []corev1.Node{node("b", true, in("10.0.0.2")), node("a", true, in("10.0.0.1"))}, "10.0.0.1"},
		{"not ready nodes are skipped", []corev1.Node{node("a", false, in("10.0.0.1")), node("b", true, in("10.0.0.2"))}, "10.0.0.2"},
		{"external wins over internal", []corev1.Node{node("a", true, in("10.0.0.1")), node("b", true, ex("203.0.113.2"))}, "203.0.113.2"},
		{"nothing ready", []corev1.Node{node("a", false, ex("203.0.113.1"))}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nodeAddress(tc.nodes); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestTenantOfLabel(t *testing.T) {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1-apiserver", Labels: map[string]string{v1alpha1.LabelTenantCluster: "c1"}}}
	if got := tenantOfLabel(context.Background(), s); len(got) != 1 || got[0].Namespace != "ns" || got[0].Name != "c1" {
		t.Errorf("labelled Secret maps to %v, want ns/c1", got)
	}
	if got := tenantOfLabel(context.Background(), &corev1.Secret{}); got != nil {
		t.Errorf("unlabelled Secret maps to %v", got)
	}
}

func TestFollowerVersion(t *testing.T) {
	withImage := func(d *appsv1.Deployment, version string) *appsv1.Deployment {
		d.Spec.Template.Spec.Containers = []corev1.Container{
			{Name: desired.ComponentAPIServer, Image: "registry.k8s.io/kube-apiserver:" + version},
			{Name: desired.ComponentKonnectivity, Image: "registry.k8s.io/kas-network-proxy/proxy-server:v0.34.0"},
		}
		return d
	}
	const old, next = "v1.33.4", "v1.34.4"
	for _, tc := range []struct {
		name     string
		observed string
		api      *appsv1.Deployment
		want     string
	}{
		{"first install", "", withImage(deploy(2, 1, 0, 0, 0, 0), next), next},
		{"no upgrade", next, withImage(deploy(2, 1, 1, 2, 2, 2), next), next},
		{"api servers rolling", old, withImage(deploy(2, 2, 2, 3, 1, 2), next), old},
		{"new template not observed yet", old, withImage(deploy(2, 2, 1, 2, 2, 2), next), old},
		{"rolled out, still the old version", old, withImage(deploy(2, 1, 1, 2, 2, 2), old), old},
		{"every api server runs the new version", old, withImage(deploy(2, 2, 2, 2, 2, 2), next), next},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := followerVersion(next, tc.observed, tc.api); got != tc.want {
				t.Errorf("followerVersion = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestEtcdScaling(t *testing.T) {
	inProgress := func(tc *v1alpha1.TenantCluster) {
		tc.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionEtcdScaling, Status: metav1.ConditionTrue, Reason: "WaitingForLearner"}}
	}
	done := func(tc *v1alpha1.TenantCluster) {
		tc.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionEtcdScaling, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonMembersMatch}}
	}
	for _, tt := range []struct {
		name  string
		sts   *appsv1.StatefulSet
		state desired.EtcdClusterState
		cond  func(*v1alpha1.TenantCluster)
		want  int32
		is    bool
	}{
		{"no StatefulSet: the first bootstrap makes the spec's members", nil, desired.EtcdClusterNew, nil, 3, false},
		{"bootstrapping: no change before the cluster exists", sts(1, 1, 1, 0, ""), desired.EtcdClusterNew, nil, 3, false},
		{"steady", sts(3, 1, 1, 3, ""), desired.EtcdClusterExisting, nil, 3, false},
		{"steady after an earlier change", sts(3, 1, 1, 3, ""), desired.EtcdClusterExisting, done, 3, false},
		{"grow asked", sts(1, 1, 1, 1, ""), desired.EtcdClusterExisting, nil, 3, true},
		{"shrink asked", sts(3, 1, 1, 3, ""), desired.EtcdClusterExisting, nil, 1, true},
		{"the StatefulSet has the count, the last learner is not promoted", sts(3, 2, 2, 2, ""), desired.EtcdClusterExisting, inProgress, 3, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := &v1alpha1.TenantCluster{}
			if tt.cond != nil {
				tt.cond(tc)
			}
			if got := etcdScaling(tc, tt.sts, tt.state, tt.want); got != tt.is {
				t.Errorf("etcdScaling = %v, want %v", got, tt.is)
			}
		})
	}
}

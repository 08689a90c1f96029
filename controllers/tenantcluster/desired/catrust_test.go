package desired

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// TestDecideCAStep walks a whole rotation, each step only when its facts
// allow it, and holds the steps that must wait.
func TestDecideCAStep(t *testing.T) {
	steady1 := FirstCATrust()
	pending := CATrust{Trusted: []int{1}, Signer: 1, Pending: 2, Handled: "r1"}
	both := CATrust{Trusted: []int{1, 2}, Signer: 1, Handled: "r1"}
	signing := CATrust{Trusted: []int{1, 2}, Signer: 2, Handled: "r1"}
	steady2 := CATrust{Trusted: []int{2}, Signer: 2, Handled: "r1"}
	all := CAFacts{RolledOut: true, LeavesBySigner: true}
	// The cluster CA: its nodes trust it and verify its serving leaves.
	now := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	clients := CATrust{Trusted: []int{1, 2}, Signer: 2, Serving: 1, Handled: "r1"}
	rebooting := CATrust{Trusted: []int{1, 2}, Signer: 2, Serving: 1, Handled: "r1", NodesSince: now}
	nodes := CAFacts{RolledOut: true, LeavesBySigner: true, NodesTrust: true}
	tests := []struct {
		name  string
		t     CATrust
		f     CAFacts
		want  CAStep
		after CATrust
	}{
		{"never rotated, nothing asked", steady1, all, CAStepNone, steady1},
		{"a request starts it", steady1, CAFacts{Request: "r1"}, CAStepIssue, pending},
		{"the issued generation is trusted beside the old", pending, CAFacts{Request: "r1"}, CAStepTrust, both},
		{"the new one signs only once the pods trust both", both, CAFacts{Request: "r1", LeavesBySigner: true}, CAStepWaitRollout, both},
		{"rolled out: the new one signs", both, all, CAStepSign, signing},
		{"old leaves left: the old one stays trusted", signing, CAFacts{RolledOut: true}, CAStepWaitRollout, signing},
		{"pods still on old leaves: the old one stays trusted", signing, CAFacts{LeavesBySigner: true}, CAStepWaitRollout, signing},
		{"new leaves rolled out: the old one is dropped", signing, all, CAStepDrop, steady2},
		{"dropped, pods still trust it: wait", steady2, CAFacts{OldLeft: true}, CAStepWaitRollout, steady2},
		{"dropped and rolled out: deleted", steady2, CAFacts{OldLeft: true, RolledOut: true}, CAStepDelete, steady2},
		{"the handled request starts nothing", steady2, CAFacts{Request: "r1", RolledOut: true}, CAStepNone, steady2},
		{"a new request after the deletion", steady2, CAFacts{Request: "r2", RolledOut: true},
			CAStepIssue, CATrust{Trusted: []int{2}, Signer: 2, Pending: 3, Handled: "r2"}},
		{"a request during a rotation waits for it", both, CAFacts{Request: "r2"}, CAStepWaitRollout, both},
		{"a request before the old one is deleted waits", steady2, CAFacts{Request: "r2", OldLeft: true}, CAStepWaitRollout, steady2},

		{"cluster CA: both trusted, not rolled out", both, CAFacts{NodesTrust: true}, CAStepWaitRollout, both},
		{"cluster CA: the new one signs the clients, the old one serves", both, nodes, CAStepSignClients, clients},
		{"cluster CA: the nodes are counted once the new signer rolled out", clients, nodes, CAStepRebootNodes, rebooting},
		{"cluster CA: not before", clients, CAFacts{NodesTrust: true}, CAStepWaitRollout, clients},
		{"cluster CA: nodes booted before are left", rebooting, nodes, CAStepWaitNodes, rebooting},
		{"cluster CA: rebooted nodes, control plane rolling", rebooting, CAFacts{NodesTrust: true, NodesRebooted: true}, CAStepWaitRollout, rebooting},
		{"cluster CA: every node rebooted, the new one serves", rebooting, CAFacts{RolledOut: true, NodesTrust: true, NodesRebooted: true}, CAStepServe, signing},
		{"cluster CA: serving leaves re-issued and rolled out, the old one is dropped", signing, nodes, CAStepDrop, steady2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DecideCAStep(tt.t, tt.f)
			if got != tt.want {
				t.Fatalf("DecideCAStep(%+v, %+v) = %q, want %q", tt.t, tt.f, got, tt.want)
			}
			next := tt.t.Advance(got, tt.f.Request, now.Add(time.Minute))
			if got == CAStepRebootNodes {
				tt.after.NodesSince = next.NodesSince // the time of the pass, checked below
				if next.NodesSince.Before(now) {
					t.Errorf("nodes counted since %s, before the pass", next.NodesSince)
				}
			}
			if !slices.Equal(next.Trusted, tt.after.Trusted) || next.Signer != tt.after.Signer ||
				next.Pending != tt.after.Pending || next.Handled != tt.after.Handled ||
				next.Serving != tt.after.Serving || !next.NodesSince.Equal(tt.after.NodesSince) {
				t.Errorf("after %s: %+v, want %+v", got, next, tt.after)
			}
			if err := next.validate(); err != nil {
				t.Errorf("after %s the record is invalid: %v", got, err)
			}
		})
	}
}

// TestCATrustRecord: the Secret's annotations round-trip, and a damaged
// record is refused naming the Secret and the annotation.
func TestCATrustRecord(t *testing.T) {
	c := mustResolve(t, newTC(), testOptions())
	for _, rec := range []CATrust{FirstCATrust(), {Trusted: []int{1}, Signer: 1, Pending: 2, Handled: "x"},
		{Trusted: []int{4, 5}, Signer: 5, Handled: "2026-11-28"},
		{Trusted: []int{1, 2}, Signer: 2, Serving: 1, Handled: "x", NodesSince: time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)}} {
		s := TrustSecret(c, RoleFrontProxyCA, rec, []byte("pem"))
		got, err := ParseCATrust(s)
		if err != nil || !slices.Equal(got.Trusted, rec.Trusted) || got.Signer != rec.Signer || got.Pending != rec.Pending || got.Handled != rec.Handled ||
			got.Serving != rec.Serving || !got.NodesSince.Equal(rec.NodesSince) {
			t.Errorf("round trip of %+v: %+v, %v", rec, got, err)
		}
		if s.Name != "alpha-front-proxy-ca-trust" || s.Labels[v1alpha1.LabelPKIRole] != "front-proxy-ca-trust" || string(s.Data["tls.crt"]) != "pem" {
			t.Errorf("trust Secret %s labels %v data %q", s.Name, s.Labels, s.Data)
		}
	}
	bad := []struct{ trusted, signer, pending, serving, since, wantIn string }{
		{"1,2", "2", "", "x", "", v1alpha1.AnnotationCAServing},
		{"1,2", "2", "", "2", "", "serving generation 2 is not the old one"},
		{"1,2", "1", "", "1", "", "serving generation 1 is not the old one"},
		{"1,2", "2", "", "1", "yesterday", v1alpha1.AnnotationCANodesSince},
		{"1,2", "2", "", "", "2026-11-28T08:00:00Z", "no serving generation waits"},
	}
	for _, b := range bad {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "alpha-ca-trust", Annotations: map[string]string{
			v1alpha1.AnnotationCATrusted: b.trusted, v1alpha1.AnnotationCASigner: b.signer, v1alpha1.AnnotationCAPending: b.pending,
			v1alpha1.AnnotationCAServing: b.serving, v1alpha1.AnnotationCANodesSince: b.since}}}
		_, err := ParseCATrust(s)
		if err == nil || !strings.Contains(err.Error(), b.wantIn) || !strings.Contains(err.Error(), "tenants/alpha-ca-trust") {
			t.Errorf("record %+v: error %v, want one naming the Secret and %q", b, err, b.wantIn)
		}
	}
	badFP := []struct{ trusted, signer, pending, wantIn string }{
		{"", "1", "", v1alpha1.AnnotationCATrusted},
		{"1,x", "1", "", v1alpha1.AnnotationCATrusted},
		{"1", "0", "", v1alpha1.AnnotationCASigner},
		{"1", "2", "", "signer 2 is not among"},
		{"1,3", "1", "", "not consecutive"},
		{"1,2,3", "2", "", "3 generations"},
		{"1,2", "1", "3", "does not follow"},
		{"1", "1", "-1", v1alpha1.AnnotationCAPending},
	}
	for _, b := range badFP {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "alpha-front-proxy-ca-trust", Annotations: map[string]string{
			v1alpha1.AnnotationCATrusted: b.trusted, v1alpha1.AnnotationCASigner: b.signer, v1alpha1.AnnotationCAPending: b.pending}}}
		_, err := ParseCATrust(s)
		if err == nil || !strings.Contains(err.Error(), b.wantIn) || !strings.Contains(err.Error(), "tenants/alpha-front-proxy-ca-trust") {
			t.Errorf("record %+v: error %v, want one naming the Secret and %q", b, err, b.wantIn)
		}
	}
}

// TestCAGenerationsRendered: during a rotation both generations have a
// Certificate and an Issuer, the leaves name the signer's Issuer, and the
// pods mount the trust Secret at the CA's path; a tenant never rotated
// renders exactly as before rotation existed.
func TestCAGenerationsRendered(t *testing.T) {
	c := mustResolve(t, newTC(), testOptions())
	leafIssuer := func(c *Cluster) string {
		for _, cert := range Certificates(c) {
			if cert.Name == c.SecretName(RoleFrontProxyClient) {
				return cert.Spec.IssuerRef.Name
			}
		}
		return ""
	}
	names := func(c *Cluster) (certs, issuers []string) {
		for _, cert := range Certificates(c) {
			if cert.Labels[v1alpha1.LabelPKIRole] == string(RoleFrontProxyCA) {
				certs = append(certs, cert.Name+"/"+cert.Spec.CommonName+"/"+cert.Labels[v1alpha1.LabelCAGeneration])
			}
		}
		for _, is := range Issuers(c) {
			if strings.HasPrefix(is.Name, "alpha-front-proxy-ca") {
				issuers = append(issuers, is.Name+"->"+is.Spec.CA.SecretName)
			}
		}
		return certs, issuers
	}
	certs, issuers := names(c)
	if !slices.Equal(certs, []string{"alpha-front-proxy-ca/front-proxy-ca/"}) || !slices.Equal(issuers, []string{"alpha-front-proxy-ca->alpha-front-proxy-ca"}) ||
		leafIssuer(c) != "alpha-front-proxy-ca" || c.volumeSecretName(RoleFrontProxyCA) != "alpha-front-proxy-ca" {
		t.Errorf("never rotated: certs %v issuers %v leaf issuer %s mount %s", certs, issuers, leafIssuer(c), c.volumeSecretName(RoleFrontProxyCA))
	}

	c.CATrust = map[PKIRole]CATrust{RoleFrontProxyCA: {Trusted: []int{1, 2}, Signer: 2}}
	certs, issuers = names(c)
	if !slices.Equal(certs, []string{"alpha-front-proxy-ca/front-proxy-ca/", "alpha-front-proxy-ca-2/front-proxy-ca-2/2"}) ||
		!slices.Equal(issuers, []string{"alpha-front-proxy-ca->alpha-front-proxy-ca", "alpha-front-proxy-ca-2->alpha-front-proxy-ca-2"}) {
		t.Errorf("rotating: certs %v issuers %v", certs, issuers)
	}
	if leafIssuer(c) != "alpha-front-proxy-ca-2" || !slices.Equal(LeafRoles(c, RoleFrontProxyCA), []PKIRole{RoleFrontProxyClient}) {
		t.Errorf("rotating: leaf issuer %s, leaves %v", leafIssuer(c), LeafRoles(c, RoleFrontProxyCA))
	}
	vols := c.podVolumes(apiServerMounts, nil)
	found := false
	for _, v := range vols {
		if v.Name == c.secretVolumeName(RoleFrontProxyCA) {
			found = v.Secret.SecretName == "alpha-front-proxy-ca-trust"
		}
		if v.Secret != nil && v.Secret.SecretName == "alpha-front-proxy-ca" {
			t.Errorf("volume %s still mounts the CA's own Secret", v.Name)
		}
	}
	if !found {
		t.Errorf("the front-proxy CA volume does not mount the trust Secret: %+v", vols)
	}
	// While generation 2 is issued, generation 1 alone is trusted: the
	// pods keep mounting its own Secret and do not roll for it.
	c.CATrust[RoleFrontProxyCA] = CATrust{Trusted: []int{1}, Signer: 1, Pending: 2}
	if c.volumeSecretName(RoleFrontProxyCA) != "alpha-front-proxy-ca" {
		t.Errorf("pending generation 2: the pods mount %s", c.volumeSecretName(RoleFrontProxyCA))
	}
	// After a rotation the trust Secret stays, holding generation 2.
	c.CATrust[RoleFrontProxyCA] = CATrust{Trusted: []int{2}, Signer: 2, Pending: 3}
	if c.volumeSecretName(RoleFrontProxyCA) != "alpha-front-proxy-ca-trust" {
		t.Errorf("generation 2 trusted: the pods mount %s", c.volumeSecretName(RoleFrontProxyCA))
	}
	// The cluster CA: while its new generation signs the clients, the
	// leaves its nodes verify stay with the old one.
	c.CATrust[RoleCA] = CATrust{Trusted: []int{1, 2}, Signer: 2, Serving: 1}
	if c.volumeSecretName(RoleCA) != "alpha-ca-trust" || c.volumeSecretName(RoleCASigner) != "alpha-ca-2" {
		t.Errorf("the cluster CA mounts %s, signs with %s", c.volumeSecretName(RoleCA), c.volumeSecretName(RoleCASigner))
	}
	issuerOf := map[PKIRole]string{}
	for _, cert := range Certificates(c) {
		issuerOf[PKIRole(cert.Labels[v1alpha1.LabelPKIRole])] = cert.Spec.IssuerRef.Name
	}
	for _, leaf := range LeafRoles(c, RoleCA) {
		want := "alpha-ca-2"
		// Named here, not read from NodeVerifiedLeaves: the list is
		// what this checks.
		if slices.Contains([]PKIRole{RoleAPIServer, RoleAPIServerKubeletClient, RoleKonnectivityServer}, leaf) {
			want = "alpha-ca"
		}
		if issuerOf[leaf] != want {
			t.Errorf("clients signed by the new generation: %s is issued by %s, want %s", leaf, issuerOf[leaf], want)
		}
	}
	if len(LeafRoles(c, RoleCA)) != 9 {
		t.Errorf("the cluster CA's leaves: %v", LeafRoles(c, RoleCA))
	}
}

// TestTrustBundle: oldest first, every trusted generation, and a missing
// certificate named.
func TestTrustBundle(t *testing.T) {
	c := mustResolve(t, newTC(), testOptions())
	secrets := SecretData{"alpha-front-proxy-ca": {"tls.crt": []byte("ONE\n")}, "alpha-front-proxy-ca-2": {"tls.crt": []byte("TWO")}}
	got, err := TrustBundle(c, RoleFrontProxyCA, CATrust{Trusted: []int{1, 2}, Signer: 1}, secrets)
	if err != nil || string(got) != "ONE\nTWO\n" {
		t.Errorf("bundle %q, %v", got, err)
	}
	_, err = TrustBundle(c, RoleFrontProxyCA, CATrust{Trusted: []int{2, 3}, Signer: 2}, secrets)
	if err == nil || !strings.Contains(err.Error(), "alpha-front-proxy-ca-3") {
		t.Errorf("missing generation: %v", err)
	}
}

// TestClusterCATrustSites: whoever verifies the tenant API server trusts the
// cluster CA's trust (its certificate, the bundle once rotated), not the
// issuer of its own client certificate, and the controller manager's
// signing pair is the signer generation's, mounted apart from the trust:
// during a rotation the client certificates and the signing key move to
// the new CA before the API server's serving certificate does.
func TestClusterCATrustSites(t *testing.T) {
	c := resolveTC(t)
	volumes := func(tpl corev1.PodTemplateSpec) map[string]string {
		out := map[string]string{}
		for _, v := range tpl.Spec.Volumes {
			if v.Secret != nil && (v.Name == "pki-ca" || v.Name == "pki-ca-signer") {
				var keys []string
				for _, i := range v.Secret.Items {
					keys = append(keys, i.Key)
				}
				out[v.Name] = v.Secret.SecretName + ":" + strings.Join(keys, ",")
			}
		}
		return out
	}
	w := workloads(t, c, sampleSecrets())
	if got := volumes(w["controller-manager"]); !maps.Equal(got, map[string]string{"pki-ca": "alpha-ca:tls.crt", "pki-ca-signer": "alpha-ca:tls.crt,tls.key"}) {
		t.Errorf("controller-manager mounts %v", got)
	}
	for _, name := range []string{"scheduler", "apiserver"} {
		if got := volumes(w[name]); !maps.Equal(got, map[string]string{"pki-ca": "alpha-ca:tls.crt"}) {
			t.Errorf("%s mounts %v", name, got)
		}
	}
	cm := mustConfigMap(t, c)
	for _, key := range []string{ConfigKeyControllerManagerConf, ConfigKeySchedulerConf, ConfigKeyKonnectivityConf} {
		if !strings.Contains(cm.Data[key], "certificate-authority: /etc/kubernetes/pki/ca/tls.crt") {
			t.Errorf("%s does not trust the cluster CA's mount:\n%s", key, cm.Data[key])
		}
	}
	if got := string(c.TrustPEM(RoleCA, sampleSecrets())); got != "cert-0" {
		t.Errorf("trust of a CA never rotated: %q, want the CA's certificate", got)
	}

	// The signing pair follows the signer generation.
	c.CATrust = map[PKIRole]CATrust{RoleCA: {Trusted: []int{1, 2}, Signer: 2}}
	secrets := sampleSecrets()
	secrets["alpha-ca-2"] = map[string][]byte{"tls.crt": []byte("cert-ca-2"), "tls.key": []byte("key-ca-2")}
	w2 := workloads(t, c, secrets)
	if got := volumes(w2["controller-manager"])["pki-ca-signer"]; got != "alpha-ca-2:tls.crt,tls.key" {
		t.Errorf("signing with generation 2, the controller manager's signing pair is %s", got)
	}
	if w2["controller-manager"].Annotations[v1alpha1.AnnotationChecksum] == w["controller-manager"].Annotations[v1alpha1.AnnotationChecksum] {
		t.Error("a new signing generation does not roll the controller manager")
	}
	// A rotated CA's trust is its trust Secret's bundle.
	c.CATrust[RoleFrontProxyCA] = CATrust{Trusted: []int{1, 2}, Signer: 1}
	secrets["alpha-front-proxy-ca-trust"] = map[string][]byte{"tls.crt": []byte("ONE\nTWO\n")}
	if got := string(c.TrustPEM(RoleFrontProxyCA, secrets)); got != "ONE\nTWO\n" {
		t.Errorf("trust of a rotating CA: %q, want the bundle", got)
	}
}

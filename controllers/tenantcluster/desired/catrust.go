package desired

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// CA rotation (docs/pki.md). A CA has generations: the first is the
// Certificate, Secret and Issuer <tenant>-<ca> every tenant has, the n-th
// is <tenant>-<ca>-<n>. Once a CA trusts a later generation, the pods no
// longer mount its own Secret but its trust Secret (<tenant>-<ca>-trust), whose
// tls.crt is the bundle of the trusted generations' certificates, at the
// same path: no flag changes, and the checksum of the bundle rolls the
// pods that trust it. The trust Secret's annotations are the rotation's
// record; the controller advances it one step at a time, each step only
// once every pod that trusts the CA runs the previous one:
//
//	steady (gen n trusted, signs)   --request-->  pending n+1 (issued, not yet trusted; no pod rolls)
//	pending n+1 issued              -->  trusted {n, n+1}, n signs
//	rolled out                      -->  n+1 signs: the leaves are re-issued by it
//	leaves re-issued, rolled out    -->  trusted {n+1} (n dropped from the bundle)
//	rolled out                      -->  gen n's Certificate, Issuer and Secret deleted
//
// Every pod that verifies a certificate of the CA trusts both generations
// from before the first new leaf exists until after the last old one is
// gone, so nothing it verifies fails in between.
//
// The cluster CA is also trusted by the tenant's nodes, which learn it at
// boot, and verified by them: its switch is split. n+1 first signs the
// client leaves and the kubelets' certificates (the controller manager's
// signing pair); then every node booted before is rebooted (its boot has
// only n trusted and kubelet certificates of n); only then do the leaves
// the nodes verify (NodeVerifiedLeaves) move to n+1, and n is dropped.

// RotatableCAs are the CAs a rotation can replace.
var RotatableCAs = []PKIRole{RoleCA, RoleFrontProxyCA, RoleEtcdCA}

// NodeVerifiedLeaves are the cluster CA's leaves the tenant's nodes
// verify with the CA they got at boot: the API server's serving
// certificate (kubelets, agents, every pod through kube-root-ca.crt), the
// Konnectivity server's (the agents) and the API server's kubelet client
// certificate (the kubelets' client CA). They move to a new generation
// only after every node booted trusting it.
var NodeVerifiedLeaves = []PKIRole{RoleAPIServer, RoleAPIServerKubeletClient, RoleKonnectivityServer}

// Rotatable tells whether role is a CA a rotation can replace.
func Rotatable(role PKIRole) bool { return slices.Contains(RotatableCAs, role) }

// RotateCAAnnotation is the TenantCluster annotation that requests the
// rotation of ca.
func RotateCAAnnotation(ca PKIRole) string { return v1alpha1.AnnotationRotateCAPrefix + string(ca) }

// CATrust is the record of one CA's generations.
type CATrust struct {
	// Trusted are the generations in the bundle, ascending; one or two.
	Trusted []int
	// Signer is the generation whose Issuer signs the CA's leaves.
	Signer int
	// Pending is a generation being issued and not yet trusted, or 0.
	Pending int
	// Handled is the request the last rotation was started for.
	Handled string
	// Serving is the generation that signs the cluster CA's
	// NodeVerifiedLeaves while it differs from Signer, or 0.
	Serving int
	// NodesSince is the time from which a node's boot counts as booted
	// with the cluster CA's new signer; zero until the rotation waits for
	// the nodes' reboots.
	NodesSince time.Time
}

// FirstCATrust is the record of a CA never rotated.
func FirstCATrust() CATrust { return CATrust{Trusted: []int{1}, Signer: 1} }

// Steady tells whether no rotation is in progress.
func (t CATrust) Steady() bool {
	return t.Pending == 0 && len(t.Trusted) == 1 && t.Trusted[0] == t.Signer
}

// ServingGen is the generation that signs the NodeVerifiedLeaves.
func (t CATrust) ServingGen() int {
	if t.Serving != 0 {
		return t.Serving
	}
	return t.Signer
}

// Generations are the generations whose Certificate and Issuer must exist.
func (t CATrust) Generations() []int {
	out := append(slices.Clone(t.Trusted), t.Signer, t.ServingGen())
	if t.Pending != 0 {
		out = append(out, t.Pending)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// validate checks the record's invariants: the signer is trusted, two
// generations at most are trusted and they are consecutive, and a pending
// generation follows a steady one.
func (t CATrust) validate() error {
	switch {
	case len(t.Trusted) == 0 || len(t.Trusted) > 2:
		return fmt.Errorf("%d generations trusted, want 1 or 2", len(t.Trusted))
	case len(t.Trusted) == 2 && t.Trusted[1] != t.Trusted[0]+1:
		return fmt.Errorf("trusted generations %v are not consecutive", t.Trusted)
	case !slices.Contains(t.Trusted, t.Signer):
		return fmt.Errorf("signer %d is not among the trusted generations %v", t.Signer, t.Trusted)
	case t.Pending != 0 && (len(t.Trusted) != 1 || t.Pending != t.Trusted[0]+1):
		return fmt.Errorf("pending generation %d does not follow the trusted %v", t.Pending, t.Trusted)
	case t.Serving != 0 && (len(t.Trusted) != 2 || t.Serving != t.Trusted[0] || t.Signer != t.Trusted[1]):
		return fmt.Errorf("serving generation %d is not the old one of %v while %d signs", t.Serving, t.Trusted, t.Signer)
	case !t.NodesSince.IsZero() && t.Serving == 0:
		return fmt.Errorf("nodes counted since %s while no serving generation waits for them", t.NodesSince.Format(time.RFC3339))
	}
	return nil
}

// CAName names generation gen of ca: its Certificate, Secret and Issuer.
func (c *Cluster) CAName(ca PKIRole, gen int) string {
	if gen <= 1 {
		return c.SecretName(ca)
	}
	return c.prefixed(fmt.Sprintf("%s-%d", ca, gen))
}

// TrustSecretName names the trust Secret of ca.
func (c *Cluster) TrustSecretName(ca PKIRole) string { return c.prefixed(string(ca) + "-trust") }

// TrustBundleKey is the trust Secret's key of the PEM bundle, and
// CertificateKey a certificate Secret's key of its certificate: the same
// tls.crt, so a pod reads the bundle where it read the CA's certificate.
const (
	TrustBundleKey = secretCertKey
	CertificateKey = secretCertKey
)

// LeafRoles are the roles whose certificates a generation of ca signs.
func LeafRoles(c *Cluster, ca PKIRole) []PKIRole {
	issuers := map[string]bool{}
	for _, g := range c.CATrustOf(ca).Generations() {
		issuers[c.CAName(ca, g)] = true
	}
	var out []PKIRole
	for _, d := range c.certDefs() {
		if !d.isCA && issuers[d.issuer] {
			out = append(out, d.role)
		}
	}
	return out
}

// RoleCASigner is not a Secret of its own but the mount of the cluster
// CA's signing generation (certificate and key) in the controller manager,
// apart from RoleCA's mount, which holds what is trusted.
const RoleCASigner PKIRole = "ca-signer"

// TrustPEM is what verifiers of ca trust, from the Secrets read: the
// bundle of its trusted generations once a later one is trusted, its own
// certificate before. The admin kubeconfigs, kubefarm's own tenant
// clients and the nodes' configuration carry it, so that they, like the
// pods, follow a rotation of the CA.
func (c *Cluster) TrustPEM(ca PKIRole, secrets SecretData) []byte {
	return secrets[c.volumeSecretName(ca)][TrustBundleKey]
}

// CATrustOf is ca's record: the one the controller read, or the first.
func (c *Cluster) CATrustOf(ca PKIRole) CATrust {
	if t, ok := c.CATrust[ca]; ok {
		return t
	}
	return FirstCATrust()
}

// signerIssuer names the Issuer that signs ca's leaves.
func (c *Cluster) signerIssuer(ca PKIRole) string { return c.CAName(ca, c.CATrustOf(ca).Signer) }

// servingIssuer names the Issuer that signs the cluster CA's
// NodeVerifiedLeaves.
func (c *Cluster) servingIssuer() string { return c.CAName(RoleCA, c.CATrustOf(RoleCA).ServingGen()) }

// volumeSecretName is the Secret the pods mount for role: the trust
// Secret of a CA that trusts anything but its first generation alone,
// every other role's own. While the first rotation issues generation 2
// the pods keep mounting generation 1's Secret, whose certificate is all
// the bundle would hold: switching to the trust Secret then would restart
// every etcd member and API server for nothing, and each etcd restart of
// the leader is a leader move (docs/etcd.md).
func (c *Cluster) volumeSecretName(role PKIRole) string {
	if role == RoleCASigner {
		return c.signerIssuer(RoleCA)
	}
	t, ok := c.CATrust[role]
	if ok && Rotatable(role) && !slices.Equal(t.Trusted, []int{1}) {
		return c.TrustSecretName(role)
	}
	return c.SecretName(role)
}

// TrustBundle is the PEM bundle of t's trusted generations, oldest first,
// from their Secrets' certificates.
func TrustBundle(c *Cluster, ca PKIRole, t CATrust, secrets SecretData) ([]byte, error) {
	var out bytes.Buffer
	for _, g := range t.Trusted {
		name := c.CAName(ca, g)
		crt := secrets[name][secretCertKey]
		if len(bytes.TrimSpace(crt)) == 0 {
			return nil, fmt.Errorf("secret %s: no CA certificate in %s", name, secretCertKey)
		}
		out.Write(bytes.TrimSpace(crt))
		out.WriteByte('\n')
	}
	return out.Bytes(), nil
}

// TrustSecret is ca's trust Secret carrying record t and bundle.
func TrustSecret(c *Cluster, ca PKIRole, t CATrust, bundle []byte) *corev1.Secret {
	trusted := make([]string, len(t.Trusted))
	for i, g := range t.Trusted {
		trusted[i] = strconv.Itoa(g)
	}
	genOrEmpty := func(g int) string {
		if g == 0 {
			return ""
		}
		return strconv.Itoa(g)
	}
	since := ""
	if !t.NodesSince.IsZero() {
		since = t.NodesSince.UTC().Format(time.RFC3339)
	}
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name: c.TrustSecretName(ca), Namespace: c.Namespace,
			Labels: mergeLabels(c.labels(componentPKI), map[string]string{v1alpha1.LabelPKIRole: string(ca) + "-trust"}),
			Annotations: map[string]string{
				v1alpha1.AnnotationCATrusted:    strings.Join(trusted, ","),
				v1alpha1.AnnotationCASigner:     strconv.Itoa(t.Signer),
				v1alpha1.AnnotationCAPending:    genOrEmpty(t.Pending),
				v1alpha1.AnnotationCAHandled:    t.Handled,
				v1alpha1.AnnotationCAServing:    genOrEmpty(t.Serving),
				v1alpha1.AnnotationCANodesSince: since,
			},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{secretCertKey: bundle},
	}
}

// ParseCATrust reads the record of a trust Secret; the error names the
// Secret and the annotation.
func ParseCATrust(s *corev1.Secret) (CATrust, error) {
	a := s.Annotations
	gen := func(key, v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("secret %s/%s: annotation %s: %q is not a generation", s.Namespace, s.Name, key, v)
		}
		return n, nil
	}
	var t CATrust
	for _, v := range strings.Split(a[v1alpha1.AnnotationCATrusted], ",") {
		g, err := gen(v1alpha1.AnnotationCATrusted, v)
		if err != nil {
			return CATrust{}, err
		}
		t.Trusted = append(t.Trusted, g)
	}
	var err error
	if t.Signer, err = gen(v1alpha1.AnnotationCASigner, a[v1alpha1.AnnotationCASigner]); err != nil {
		return CATrust{}, err
	}
	if p := a[v1alpha1.AnnotationCAPending]; p != "" {
		if t.Pending, err = gen(v1alpha1.AnnotationCAPending, p); err != nil {
			return CATrust{}, err
		}
	}
	if v := a[v1alpha1.AnnotationCAServing]; v != "" {
		if t.Serving, err = gen(v1alpha1.AnnotationCAServing, v); err != nil {
			return CATrust{}, err
		}
	}
	if v := a[v1alpha1.AnnotationCANodesSince]; v != "" {
		if t.NodesSince, err = time.Parse(time.RFC3339, v); err != nil {
			return CATrust{}, fmt.Errorf("secret %s/%s: annotation %s: %q is not an RFC 3339 time", s.Namespace, s.Name, v1alpha1.AnnotationCANodesSince, v)
		}
	}
	t.Handled = a[v1alpha1.AnnotationCAHandled]
	if err := t.validate(); err != nil {
		return CATrust{}, fmt.Errorf("secret %s/%s: annotations %s/%s/%s: %w", s.Namespace, s.Name,
			v1alpha1.AnnotationCATrusted, v1alpha1.AnnotationCASigner, v1alpha1.AnnotationCAPending, err)
	}
	return t, nil
}

// CAStep is what a rotation does next.
type CAStep string

const (
	// CAStepNone: steady, nothing requested.
	CAStepNone CAStep = ""
	// CAStepIssue: a request arrived; the next generation is issued.
	CAStepIssue CAStep = "NewCAIssuing"
	// CAStepTrust: the new generation is issued; both are trusted.
	CAStepTrust CAStep = "BothTrusted"
	// CAStepSign: every pod trusts both; the new generation signs.
	CAStepSign CAStep = "SigningWithNew"
	// CAStepSignClients (the cluster CA): every pod trusts both; the new
	// generation signs all but the NodeVerifiedLeaves, and the kubelets'
	// certificates from now on.
	CAStepSignClients CAStep = "SigningClientsWithNew"
	// CAStepRebootNodes (the cluster CA): the controller manager signs
	// with the new generation; nodes booted before now are asked to
	// reboot (their Machines' RebootRequired), through their pools'
	// rolling reboot-to-update.
	CAStepRebootNodes CAStep = "NodesRebooting"
	// CAStepWaitNodes: the next step waits until every node of the tenant
	// booted since the record's NodesSince.
	CAStepWaitNodes CAStep = "WaitingForNodeReboots"
	// CAStepServe (the cluster CA): every node trusts both; the new
	// generation signs the NodeVerifiedLeaves too.
	CAStepServe CAStep = "ServingWithNew"
	// CAStepDrop: every leaf is the new generation's and every pod runs
	// it; the old generation leaves the bundle.
	CAStepDrop CAStep = "OldCADropped"
	// CAStepDelete: no pod trusts the old generation any more; its
	// Certificate, Issuer and Secret are deleted.
	CAStepDelete CAStep = "OldCADeleted"
	// CAStepWaitRollout: the next step waits until every pod that trusts
	// the CA runs the current bundle (and, after the switch, its leaves).
	CAStepWaitRollout CAStep = "WaitingForRollout"
)

// CAFacts is what the controller observed for one CA in this pass.
type CAFacts struct {
	// Request is the TenantCluster's rotation annotation.
	Request string
	// LeavesBySigner: every leaf of the CA is signed by the signer
	// generation.
	LeavesBySigner bool
	// RolledOut: every workload that trusts the CA or uses its leaves runs
	// the pod template this pass applied.
	RolledOut bool
	// OldLeft: a generation below the signer still has objects.
	OldLeft bool
	// NodesTrust: the tenant's nodes trust the CA and verify its
	// NodeVerifiedLeaves (the cluster CA).
	NodesTrust bool
	// NodesRebooted: every node of the tenant booted since the record's
	// NodesSince.
	NodesRebooted bool
}

// DecideCAStep picks the next step of ca's rotation. Only the
// controller's late phase takes it, after the pass applied the workloads
// from the record as it is; the pending generation is issued by then,
// because the pass stops at the PKI phase while any Certificate is not.
func DecideCAStep(t CATrust, f CAFacts) CAStep {
	switch {
	case t.Pending != 0:
		return CAStepTrust
	case len(t.Trusted) == 2 && t.Signer == t.Trusted[0] && f.NodesTrust:
		return waitOr(f.RolledOut, CAStepSignClients)
	case len(t.Trusted) == 2 && t.Signer == t.Trusted[0]:
		return waitOr(f.RolledOut, CAStepSign)
	case len(t.Trusted) == 2 && t.Serving != 0 && t.NodesSince.IsZero():
		return waitOr(f.RolledOut, CAStepRebootNodes)
	case len(t.Trusted) == 2 && t.Serving != 0 && !f.RolledOut:
		return CAStepWaitRollout
	case len(t.Trusted) == 2 && t.Serving != 0:
		if !f.NodesRebooted {
			return CAStepWaitNodes
		}
		return CAStepServe
	case len(t.Trusted) == 2:
		return waitOr(f.RolledOut && f.LeavesBySigner, CAStepDrop)
	case f.OldLeft:
		return waitOr(f.RolledOut, CAStepDelete)
	case f.Request != "" && f.Request != t.Handled:
		return CAStepIssue
	}
	return CAStepNone
}

func waitOr(ready bool, step CAStep) CAStep {
	if ready {
		return step
	}
	return CAStepWaitRollout
}

// Advance is the record after step; request is what CAStepIssue handles,
// now the time CAStepRebootNodes counts the nodes' boots from.
func (t CATrust) Advance(step CAStep, request string, now time.Time) CATrust {
	next := t
	next.Trusted = slices.Clone(t.Trusted)
	switch step {
	case CAStepIssue:
		next.Pending, next.Handled = t.Signer+1, request
	case CAStepTrust:
		next.Trusted, next.Pending = append(next.Trusted, t.Pending), 0
	case CAStepSign:
		next.Signer = t.Trusted[len(t.Trusted)-1]
	case CAStepSignClients:
		next.Signer, next.Serving = t.Trusted[len(t.Trusted)-1], t.Signer
	case CAStepRebootNodes:
		next.NodesSince = now.UTC().Truncate(time.Second)
	case CAStepServe:
		next.Serving, next.NodesSince = 0, time.Time{}
	case CAStepDrop:
		next.Trusted = []int{t.Signer}
	}
	return next
}

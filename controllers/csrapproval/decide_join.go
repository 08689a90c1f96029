package csrapproval

import (
	"fmt"
	"slices"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
)

// A machine joins its tenant with a bootstrap token kubefarm-pxe issued for
// it alone (pxe/jointoken): its kubelet authenticates as
// system:bootstrap:<token id> and asks, through a CSR for the
// kubernetes.io/kube-apiserver-client-kubelet signer, for the client
// certificate it will be a node with. kube-controller-manager would approve
// any such request from a bootstrapper, for any node name (csrapproving's
// nodeclient rule checks the form, not the name), so whoever holds a token
// could become any node. kubefarm knows which Machine each token was issued
// for (the Secret's kubefarm.io/machine label) and that Machine's hostname:
// DecideJoin approves a request only for that name, and the controller then
// deletes the token, so it is good for one certificate.
//
// Renewals (the node asking as system:node:<name> for its own name) are
// kube-controller-manager's: its selfnodeclient rule checks that the name
// asked for is the requester's, which is all there is to check once the
// first certificate was right.

const bootstrapUserPrefix = "system:bootstrap:"

// JoinLookup finds what a join request is checked against. Each function
// reports false when there is none; a failure to look is the caller's to
// handle (it must not decide on it, see tenant.go).
type JoinLookup struct {
	// Token returns the tenant's Secret kube-system/bootstrap-token-<id>.
	Token func(id string) (*corev1.Secret, bool)
	// Machine returns the admin cluster's Machine called name in the
	// TenantCluster's namespace, the only namespace a token's label can
	// name a Machine in.
	Machine func(name string) (*kubefarmv1.Machine, bool)
}

// JoinTokenID is the id of the bootstrap token csr was made with, when it
// is a kubelet client request made with one.
func JoinTokenID(csr *certificatesv1.CertificateSigningRequest) (string, bool) {
	if csr == nil || csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
		return "", false
	}
	id, ok := strings.CutPrefix(csr.Spec.Username, bootstrapUserPrefix)
	return id, ok
}

// kubeletClientUsages are the two sets kube-controller-manager's
// csrapproving and csrsigning controllers accept for a kubelet client
// certificate (k8s.io/kubernetes pkg/apis/certificates
// ValidateKubeletClientCSR): the kubelet adds key encipherment when its key
// is RSA. Nothing else, in particular not server auth: a node's client
// certificate must not double as a serving certificate.
var kubeletClientUsages = [][]certificatesv1.KeyUsage{
	{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
	{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth},
}

// DecideJoin decides csr, a request of the tenant cluster whose
// TenantCluster is called tenant, at time now.
//
// Only undecided kubernetes.io/kube-apiserver-client-kubelet requests from
// a bootstrap token's bearer (system:bootstrap:<id>) are considered; others
// are ignored (renewals by nodes are kube-controller-manager's, and anyone
// else's requests are the tenant admin's). One is approved only when the
// token is kubefarm's (its Secret is in kube-system, of the bootstrap token
// type, labelled with a Machine and only in kubefarm's group, and not
// expired), the Machine it names belongs to this tenant, and the request is
// exactly what that Machine's kubelet asks for: CN=system:node:<hostname>,
// O=system:nodes and nothing else in the subject, no subject alternative
// names, the kubelet client usages, a verified signature and a key kubefarm
// certifies. Anything else is denied, with the first rule it broke.
func DecideJoin(csr *certificatesv1.CertificateSigningRequest, tenant string, now time.Time, l JoinLookup) Decision {
	if csr == nil {
		return Decision{Ignore, kubefarmv1.ReasonCSRNotKubeletClient, "no request"}
	}
	if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
		return Decision{Ignore, kubefarmv1.ReasonCSRNotKubeletClient, fmt.Sprintf("signer %q is not %s", csr.Spec.SignerName, certificatesv1.KubeAPIServerClientKubeletSignerName)}
	}
	if d, decided := alreadyDecided(csr); decided {
		return d
	}
	id, d, ok := checkJoinRequester(csr)
	if !ok {
		return d
	}
	machineName, d, ok := checkJoinToken(id, now, l)
	if !ok {
		return d
	}
	machine, node, d, ok := checkJoinMachine(id, machineName, tenant, l)
	if !ok {
		return d
	}
	if d, ok := checkJoinRequest(csr, id, machine, node); !ok {
		return d
	}
	return Decision{Approve, kubefarmv1.ReasonCSRJoinApproved, fmt.Sprintf("bootstrap token %s was issued for Machine %s, and the request is its kubelet's, for %s", id, machine, node)}
}

// checkJoinRequester is the id of the bootstrap token csr was made with; ok is
// false, with the decision, when the requester is no bootstrap token
// kubefarm could have issued.
func checkJoinRequester(csr *certificatesv1.CertificateSigningRequest) (id string, d Decision, ok bool) {
	id, ok = JoinTokenID(csr)
	if !ok && strings.HasPrefix(csr.Spec.Username, nodeUserPrefix) {
		// A node's renewal of its own certificate is kube-controller-
		// manager's (selfnodeclient). A node asking for another name is
		// no renewal and nobody would approve it; deny it so that it
		// shows, instead of waiting forever (root on one node trying to
		// become another).
		if req, _ := parse(csr.Spec.Request); req != nil && req.Subject.CommonName != csr.Spec.Username {
			return "", deny(kubefarmv1.ReasonCSRNotSelf, "node %s asks for a client certificate as %s: a node may only renew its own",
				short(csr.Spec.Username), short(req.Subject.CommonName)), false
		}
	}
	if !ok {
		return "", Decision{Ignore, kubefarmv1.ReasonCSRNotBootstrap, fmt.Sprintf("requester %s is not a bootstrap token (%s<id>): "+
			"a node's renewal is kube-controller-manager's to approve, anyone else's the tenant admin's", short(csr.Spec.Username), bootstrapUserPrefix)}, false
	}
	if !bootstraptoken.ValidID(id) {
		return "", deny(kubefarmv1.ReasonCSRUnknownToken, "requester %s does not name a bootstrap token id ([a-z0-9]{6})", short(csr.Spec.Username)), false
	}
	if !slices.Contains(csr.Spec.Groups, bootstraptoken.DefaultGroup) {
		return "", deny(kubefarmv1.ReasonCSRForeignToken, "requester %s is not in group %s: the token is not one kubefarm issued for a machine",
			csr.Spec.Username, bootstraptoken.DefaultGroup), false
	}
	return id, Decision{}, true
}

// checkJoinToken is the name of the Machine bootstrap token id was issued for;
// ok is false, with the decision, when the token's Secret is missing, not
// kubefarm's or expired at now.
func checkJoinToken(id string, now time.Time, l JoinLookup) (machineName string, d Decision, ok bool) {
	secretName := bootstraptoken.Namespace + "/" + bootstraptoken.SecretName(id)
	s, ok := l.Token(id)
	if !ok {
		return "", deny(kubefarmv1.ReasonCSRUnknownToken, "bootstrap token %s (Secret %s) does not exist: already used, expired, or never issued", id, secretName), false
	}
	if s.Type != corev1.SecretTypeBootstrapToken {
		return "", deny(kubefarmv1.ReasonCSRForeignToken, "Secret %s is of type %s, not %s", secretName, short(string(s.Type)), corev1.SecretTypeBootstrapToken), false
	}
	machineName = s.Labels[kubefarmv1.LabelMachine]
	if machineName == "" {
		return "", deny(kubefarmv1.ReasonCSRForeignToken, "Secret %s has no label %s: kubefarm did not issue it for a machine", secretName, kubefarmv1.LabelMachine), false
	}
	if g := string(s.Data[bootstraptoken.KeyExtraGroups]); g != bootstraptoken.DefaultGroup {
		return "", deny(kubefarmv1.ReasonCSRForeignToken, "Secret %s: %s is %s, not exactly %s", secretName, bootstraptoken.KeyExtraGroups, short(g), bootstraptoken.DefaultGroup), false
	}
	if bootstraptoken.Expired(s, now) {
		return "", deny(kubefarmv1.ReasonCSRTokenExpired, "bootstrap token %s expired (%s %s)", id, bootstraptoken.KeyExpiration, short(string(s.Data[bootstraptoken.KeyExpiration]))), false
	}
	return machineName, Decision{}, true
}

// checkJoinMachine is the Machine machineName of the tenant ("namespace/name")
// and the node user its kubelet must ask as; ok is false, with the
// decision, when there is no such Machine of the tenant with a hostname.
func checkJoinMachine(id, machineName, tenant string, l JoinLookup) (machine, node string, d Decision, ok bool) {
	m, ok := l.Machine(machineName)
	if !ok {
		return "", "", deny(kubefarmv1.ReasonCSRNoMachine, "bootstrap token %s was issued for Machine %s, which does not exist in TenantCluster %s's namespace", id, short(machineName), tenant), false
	}
	machine = m.Namespace + "/" + m.Name
	if m.Spec.Cluster != tenant {
		return "", "", deny(kubefarmv1.ReasonCSRForeignMachine, "bootstrap token %s was issued for Machine %s of TenantCluster %s, not %s", id, machine, short(m.Spec.Cluster), tenant), false
	}
	if m.Spec.Hostname == "" {
		return "", "", deny(kubefarmv1.ReasonCSRNoMachine, "Machine %s of bootstrap token %s has no hostname", machine, id), false
	}
	return machine, nodeUserPrefix + m.Spec.Hostname, Decision{}, true
}

// checkJoinRequest checks that csr is a kubelet client's request for node;
// ok is false, with the decision, when it is not.
func checkJoinRequest(csr *certificatesv1.CertificateSigningRequest, id, machine, node string) (d Decision, ok bool) {
	if !usagesAreKubeletClient(csr.Spec.Usages) {
		return deny(kubefarmv1.ReasonCSRClientUsages, "usages %v are not a kubelet client's: want %v, or %v with an RSA key",
			csr.Spec.Usages, kubeletClientUsages[0], kubeletClientUsages[1]), false
	}
	req, d := parse(csr.Spec.Request)
	if req == nil {
		return d, false
	}
	switch fault, msg := subjectProblem(req, node); fault {
	case subjectCN:
		return deny(kubefarmv1.ReasonCSRCommonName, "%s (the hostname of Machine %s, which token %s was issued for)", msg, machine, id), false
	case subjectO:
		return deny(kubefarmv1.ReasonCSROrganization, "%s", msg), false
	case subjectExtra:
		return deny(kubefarmv1.ReasonCSRExtraSubject, "%s", msg), false
	}
	if n := len(req.DNSNames) + len(req.IPAddresses) + len(req.EmailAddresses) + len(req.URIs); n > 0 {
		return deny(kubefarmv1.ReasonCSRSANs, "a kubelet client request has no subject alternative names; this one has %d (%d DNS, %d IP, %d email, %d URI)",
			n, len(req.DNSNames), len(req.IPAddresses), len(req.EmailAddresses), len(req.URIs)), false
	}
	return Decision{}, true
}

// alreadyDecided ignores a request that has a decision or a certificate.
func alreadyDecided(csr *certificatesv1.CertificateSigningRequest) (Decision, bool) {
	for _, c := range csr.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateApproved, certificatesv1.CertificateDenied, certificatesv1.CertificateFailed:
			return Decision{Ignore, kubefarmv1.ReasonCSRAlreadyDecided, fmt.Sprintf("request already has condition %s", c.Type)}, true
		}
	}
	if len(csr.Status.Certificate) > 0 {
		return Decision{Ignore, kubefarmv1.ReasonCSRAlreadyDecided, "request already has a certificate"}, true
	}
	return Decision{}, false
}

// usagesAreKubeletClient says whether usages are one of
// kubeletClientUsages, in any order, each once.
func usagesAreKubeletClient(usages []certificatesv1.KeyUsage) bool {
	sorted := slices.Clone(usages)
	slices.Sort(sorted)
	for _, want := range kubeletClientUsages {
		w := slices.Clone(want)
		slices.Sort(w)
		if slices.Equal(sorted, w) {
			return true
		}
	}
	return false
}

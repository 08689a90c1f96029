// Package csrapproval decides the kubelet serving-certificate requests of a
// tenant cluster's nodes, and the client-certificate requests of machines
// joining it with a bootstrap token (decide_join.go).
//
// A kubelet asks for its serving certificate through a CSR for the
// kubernetes.io/kubelet-serving signer, and Kubernetes leaves its approval to
// someone else, because only someone who knows the machines can tell a
// node's own names and addresses from another's. kubefarm knows them: every
// node is a Machine with a hostname and a static IP. A certificate approved
// for the wrong name or address would let one node impersonate another to
// the API server (kubectl exec, logs and port-forward go through the
// kubelet's serving port), so the decision is strict and kept apart from the
// controller that applies it: pure, table-tested and fuzzed.
package csrapproval

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

// Verdict is what to do with a request.
type Verdict int

const (
	// Ignore leaves the request to someone else: it is not a kubelet
	// serving request, or it is already decided.
	Ignore Verdict = iota
	// Approve adds the Approved condition.
	Approve
	// Deny adds the Denied condition, so that the kubelet and an operator
	// see why instead of waiting for an approval that will not come.
	Deny
)

func (v Verdict) String() string {
	switch v {
	case Ignore:
		return "Ignore"
	case Approve:
		return "Approve"
	case Deny:
		return "Deny"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Decision is a verdict with the condition's reason and message.
type Decision struct {
	Verdict Verdict
	// Reason is CamelCase, for the condition's reason.
	Reason string
	// Message names what was checked or what was wrong.
	Message string
}

const (
	nodeUserPrefix = "system:node:"
	nodesGroup     = "system:nodes"
	pemType        = "CERTIFICATE REQUEST"
)

// MaxRequestBytes bounds spec.request before it is parsed. A kubelet's
// request is well under 1 KiB; the API server accepts much larger ones, and
// parsing (and checking the signature of) whatever a node sends is work the
// manager should not do for it without limit.
const MaxRequestBytes = 16 << 10

// Identity is what a node may put in its serving certificate: the names and
// addresses of its Machine. It is a value, not the Machine, so that the
// decision does not depend on how the controller finds the Machine.
type Identity struct {
	// Machine is namespace/name, for messages.
	Machine  string
	DNSNames []string
	IPs      []net.IP
}

// IdentityOf is the identity of m in pool (nil when the pool is gone): its
// hostname, the hostname in the pool's boot network domain
// (spec.network.domain), its IP, and the address of its hostNetwork's
// nodeLink when that has one (the kubelet's --node-ip there). These are the
// names and addresses the kubelet reports for itself, so they are what it
// asks for. A hostNetwork that does not resolve for m adds nothing: such a
// machine gets no /config to boot with either.
func IdentityOf(m *kubefarmv1.Machine, pool *kubefarmv1.NodePool) Identity {
	id := Identity{Machine: m.Namespace + "/" + m.Name}
	var domain string
	if pool != nil {
		domain = pool.Spec.Network.Domain
	}
	if m.Spec.Hostname != "" {
		id.DNSNames = append(id.DNSNames, m.Spec.Hostname)
		if domain != "" {
			id.DNSNames = append(id.DNSNames, m.Spec.Hostname+"."+domain)
		}
	}
	if ip := net.ParseIP(m.Spec.IP); ip != nil {
		id.IPs = append(id.IPs, ip)
	}
	if pool == nil {
		return id
	}
	n, err := nodeconfig.MachineNetwork(m, pool)
	if a := n.NodeAddress(); err == nil && a.IsValid() {
		if ip := net.IP(a.AsSlice()); !slices.ContainsFunc(id.IPs, ip.Equal) {
			id.IPs = append(id.IPs, ip)
		}
	}
	return id
}

// allowedUsages are what a serving certificate needs: server auth, with the
// key usages of an ECDSA (digital signature) or RSA (key encipherment) key.
// Client auth in particular is refused: a serving certificate must never
// double as a client identity.
var allowedUsages = []certificatesv1.KeyUsage{
	certificatesv1.UsageDigitalSignature,
	certificatesv1.UsageKeyEncipherment,
	certificatesv1.UsageServerAuth,
}

var (
	oidCommonName   = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidOrganization = asn1.ObjectIdentifier{2, 5, 4, 10}
)

// Decide decides csr. lookup finds the identity of the Machine that is node
// nodeName of this tenant; it reports false when there is none (or when the
// name is ambiguous, which the caller must treat the same way).
//
// Only kubernetes.io/kubelet-serving requests that are still undecided are
// considered. A request from a node that is not a Machine, or that asks for
// anything beyond its Machine's names and addresses, is denied, not ignored:
// every node of a tenant is a Machine, so there is no one else to approve it,
// and a denial tells the kubelet and the operator why.
//
// Subject alternative names of types other than DNS, IP, email and URI are
// not looked at: Go's parser drops them, and so does the signer, which is
// the same code, so they never reach a certificate.
func Decide(csr *certificatesv1.CertificateSigningRequest, lookup func(nodeName string) (Identity, bool)) Decision {
	if csr == nil {
		return Decision{Ignore, kubefarmv1.ReasonCSROtherSigner, "no request"}
	}
	if csr.Spec.SignerName != certificatesv1.KubeletServingSignerName {
		return Decision{Ignore, kubefarmv1.ReasonCSROtherSigner, fmt.Sprintf("signer %q is not %s", csr.Spec.SignerName, certificatesv1.KubeletServingSignerName)}
	}
	if d, decided := alreadyDecided(csr); decided {
		return d
	}

	user := csr.Spec.Username
	node, ok := strings.CutPrefix(user, nodeUserPrefix)
	if !ok || node == "" {
		return deny(kubefarmv1.ReasonCSRNotANode, "requester %q is not a node (%s<name>)", user, nodeUserPrefix)
	}
	if !slices.Contains(csr.Spec.Groups, nodesGroup) {
		return deny(kubefarmv1.ReasonCSRNotANode, "requester %q is not in group %s", user, nodesGroup)
	}
	id, ok := lookup(node)
	if !ok {
		return deny(kubefarmv1.ReasonCSRUnknownNode, "node %q is not a Machine of this tenant", node)
	}

	serverAuth := false
	for _, u := range csr.Spec.Usages {
		if !slices.Contains(allowedUsages, u) {
			return deny(kubefarmv1.ReasonCSRUsages, "usage %q is not allowed for a kubelet serving certificate (allowed: %v)", u, allowedUsages)
		}
		serverAuth = serverAuth || u == certificatesv1.UsageServerAuth
	}
	if !serverAuth {
		return deny(kubefarmv1.ReasonCSRUsages, "usages %v do not include %q", csr.Spec.Usages, certificatesv1.UsageServerAuth)
	}

	req, d := parse(csr.Spec.Request)
	if req == nil {
		return d
	}

	if d := checkSubject(req, user); d != nil {
		return *d
	}

	if len(req.EmailAddresses) > 0 {
		return deny(kubefarmv1.ReasonCSRForbiddenSAN, "email SANs are not allowed (%s)", short(req.EmailAddresses[0]))
	}
	if len(req.URIs) > 0 {
		return deny(kubefarmv1.ReasonCSRForbiddenSAN, "URI SANs are not allowed (%s)", short(req.URIs[0].String()))
	}
	if len(req.DNSNames)+len(req.IPAddresses) == 0 {
		return deny(kubefarmv1.ReasonCSRNoSAN, "request has no DNS or IP SAN")
	}
	for _, n := range req.DNSNames {
		if !slices.Contains(id.DNSNames, n) {
			return deny(kubefarmv1.ReasonCSRForeignSAN, "DNS SAN %s is not a name of Machine %s (%q)", short(n), id.Machine, id.DNSNames)
		}
	}
	for _, ip := range req.IPAddresses {
		if !slices.ContainsFunc(id.IPs, ip.Equal) {
			return deny(kubefarmv1.ReasonCSRForeignSAN, "IP SAN %s is not an address of Machine %s (%v)", ip, id.Machine, id.IPs)
		}
	}
	return Decision{Approve, kubefarmv1.ReasonCSRApproved, fmt.Sprintf("node %q is Machine %s and asks only for its names and addresses", node, id.Machine)}
}

// short quotes a value taken from the request for a message, cut so that a
// node cannot write kilobytes into a condition.
func short(s string) string {
	const max = 80
	if len(s) > max {
		return fmt.Sprintf("%q...", s[:max])
	}
	return fmt.Sprintf("%q", s)
}

func deny(reason, format string, args ...any) Decision {
	return Decision{Deny, reason, fmt.Sprintf(format, args...)}
}

// parse reads one PEM CERTIFICATE REQUEST and nothing else, and checks its
// signature and key. On failure the request is nil and the Decision says why.
func parse(raw []byte) (*x509.CertificateRequest, Decision) {
	if len(raw) > MaxRequestBytes {
		return nil, deny(kubefarmv1.ReasonCSRTooLarge, "request is %d bytes, over %d", len(raw), MaxRequestBytes)
	}
	block, rest := pem.Decode(raw)
	if block == nil {
		return nil, deny(kubefarmv1.ReasonCSRMalformed, "request is not PEM")
	}
	if block.Type != pemType {
		return nil, deny(kubefarmv1.ReasonCSRMalformed, "PEM block is %q, not %q", block.Type, pemType)
	}
	if len(block.Headers) > 0 {
		return nil, deny(kubefarmv1.ReasonCSRMalformed, "PEM block has headers")
	}
	// A second block would be ignored by the signer but could mislead a
	// human reading the request; one request, one block.
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, deny(kubefarmv1.ReasonCSRMalformed, "request has data after its PEM block")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, deny(kubefarmv1.ReasonCSRMalformed, "request does not parse: %v", err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, deny(kubefarmv1.ReasonCSRBadSignature, "request signature does not verify: %v", err)
	}
	if msg := weakKey(req.PublicKey); msg != "" {
		return nil, deny(kubefarmv1.ReasonCSRWeakKey, "%s", msg)
	}
	return req, Decision{}
}

// weakKey says what is wrong with a key kubefarm will not have certified, ""
// when nothing is. The kubelet makes ECDSA P-256 keys; RSA of at least 2048
// bits and Ed25519 are what a hand-configured kubelet might use.
func weakKey(k any) string {
	switch k := k.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
			return ""
		}
		return "ECDSA key is not on P-256, P-384 or P-521"
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return fmt.Sprintf("RSA key of %d bits, under 2048", k.N.BitLen())
		}
		return ""
	case ed25519.PublicKey:
		return ""
	}
	return fmt.Sprintf("key type %T is not supported", k)
}

// checkSubject requires exactly CN=<user> and O=system:nodes. Anything else
// in the subject (another O such as system:masters, an OU, a serial number)
// would be copied into the certificate by the signer, and some consumers
// read identity from such fields.
func checkSubject(req *x509.CertificateRequest, user string) *Decision {
	if _, msg := subjectProblem(req, user); msg != "" {
		d := deny(kubefarmv1.ReasonCSRSubject, "%s", msg)
		return &d
	}
	return nil
}

// subjectFault is which part of a subject is wrong.
type subjectFault int

const (
	subjectOK subjectFault = iota
	subjectCN
	subjectO
	subjectExtra
)

// subjectProblem checks that the subject is exactly CN=<cn>, O=system:nodes
// and says what is wrong when it is not: the first attribute that is
// neither CN nor O, or is one with the wrong value, else a CN or O missing
// or repeated. The serving decision reports every fault under one reason,
// the join decision under one reason each.
func subjectProblem(req *x509.CertificateRequest, cn string) (subjectFault, string) {
	var cns, orgs int
	for _, atv := range req.Subject.Names {
		v, isString := atv.Value.(string)
		switch {
		case atv.Type.Equal(oidCommonName):
			cns++
			if !isString || v != cn {
				return subjectCN, fmt.Sprintf("subject CN is %s, want %q", short(fmt.Sprint(atv.Value)), cn)
			}
		case atv.Type.Equal(oidOrganization):
			orgs++
			if !isString || v != nodesGroup {
				return subjectO, fmt.Sprintf("subject O %s is not %q", short(fmt.Sprint(atv.Value)), nodesGroup)
			}
		default:
			return subjectExtra, fmt.Sprintf("subject has attribute %v; only CN and O are allowed", atv.Type)
		}
	}
	msg := fmt.Sprintf("subject must be exactly CN=%s, O=%s; it has %d CN and %d O", cn, nodesGroup, cns, orgs)
	switch {
	case cns != 1:
		return subjectCN, msg
	case orgs != 1:
		return subjectO, msg
	}
	return subjectOK, ""
}

package desired

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
)

// PKIRole is one certificate (or key) of a tenant control plane. It is the
// suffix of the Certificate's and Secret's name and the directory the Secret
// is mounted at under /etc/kubernetes/pki.
type PKIRole string

// The three CAs. They are separate because each one's signature means
// something different to its verifier: the cluster CA makes a client a
// Kubernetes user, the front-proxy CA lets a client assert any user through
// request headers, and the etcd CA grants full access to the datastore.
// Sharing a CA would let a certificate of one kind pass as another.
const (
	RoleCA           PKIRole = "ca"
	RoleFrontProxyCA PKIRole = "front-proxy-ca"
	RoleEtcdCA       PKIRole = "etcd-ca"
)

// Leaf certificates and the service-account key.
const (
	RoleAPIServer              PKIRole = "apiserver"
	RoleAPIServerKubeletClient PKIRole = "apiserver-kubelet-client"
	RoleAPIServerEtcdClient    PKIRole = "apiserver-etcd-client"
	RoleFrontProxyClient       PKIRole = "front-proxy-client"
	RoleEtcdServer             PKIRole = "etcd-server"
	RoleEtcdPeer               PKIRole = "etcd-peer"
	RoleControllerManager      PKIRole = "controller-manager"
	RoleScheduler              PKIRole = "scheduler"
	// RoleKonnectivityServer serves the agents' connections. It is signed by
	// the cluster CA, not a CA of its own: agents are tenant pods, and the
	// cluster CA is already in every pod's service-account volume (ca.crt),
	// so agents verify the server with no extra distribution step, and a
	// certificate from the cluster CA for a server name grants nothing
	// beyond serving that name.
	RoleKonnectivityServer PKIRole = "konnectivity-server"
	// RoleKonnectivityClient is konnectivity-server's identity towards the
	// tenant API server, used to review the agents' service-account tokens.
	RoleKonnectivityClient PKIRole = "konnectivity-client"
	// RoleAdmin is the everyday administrator: a user in group
	// GroupClusterAdmins, which an RBAC binding (TenantRBAC) maps to
	// cluster-admin, so access can be audited and revoked by RBAC.
	RoleAdmin PKIRole = "admin"
	// RoleSuperAdmin is break-glass: group system:masters bypasses
	// authorization entirely and cannot be revoked short of rotating the
	// CA. The controller uses it only to create the RBAC bindings the other
	// identities need; it is never handed to users.
	RoleSuperAdmin PKIRole = "super-admin"
	// RoleTokenIssuer is kubefarm-pxe's identity in the tenant: it creates,
	// revokes and prunes the machines' bootstrap tokens and nothing else
	// (the Role from TokenIssuerRBAC). A certificate of its own, rather
	// than the admin's, so that the credential kubefarm-pxe holds cannot
	// do more than issue tokens.
	RoleTokenIssuer PKIRole = "token-issuer"
	// RoleServiceAccount holds the key that signs service-account tokens.
	// See certificateFor for why it is a cert-manager Certificate.
	RoleServiceAccount PKIRole = "service-account"
)

// Identities kubefarm gives its client certificates. Where Kubernetes has a
// built-in role for the job the identity is a plain user bound to that role
// (TenantRBAC), not a member of system:masters.
const (
	UserKubeletClient      = "kubefarm:apiserver-kubelet-client"
	UserKonnectivityServer = "system:konnectivity-server"
	UserAdmin              = "kubefarm:admin"
	UserSuperAdmin         = "kubefarm:super-admin"
	// UserTokenIssuer has no organization: its only permissions are the
	// tenant Role bound to this user by name.
	UserTokenIssuer    = bootstraptoken.IssuerUser
	GroupClusterAdmins = "kubefarm:cluster-admins"
	GroupMasters       = "system:masters"
	// FrontProxyClientName must match --requestheader-allowed-names.
	FrontProxyClientName = "front-proxy-client"
)

// Lifetimes. CAs live ten years and keep their key across renewals
// (rotationPolicy Never): a new CA key would invalidate every certificate
// already issued, including the kubelet certificates on the tenant's nodes,
// which cert-manager does not manage. Leaves live one year and get a fresh
// key at every renewal.
var (
	caDuration          = metav1.Duration{Duration: 10 * 365 * 24 * time.Hour}
	caRenewBefore       = metav1.Duration{Duration: 365 * 24 * time.Hour}
	leafDuration        = metav1.Duration{Duration: 365 * 24 * time.Hour}
	leafRenewBefore     = metav1.Duration{Duration: 30 * 24 * time.Hour}
	revisionHistoryKeep = int32(1)
)

type certDef struct {
	role   PKIRole
	issuer string // Issuer name
	isCA   bool
	cn     string
	orgs   []string
	usages []cmapi.KeyUsage
	dns    []string
	ips    []string
	// signingKey marks the service-account key: RSA, never rotated.
	signingKey bool
	// generation of a CA past its first (0 otherwise): it names the
	// Certificate and is its LabelCAGeneration.
	generation int
}

var (
	serverUsages = []cmapi.KeyUsage{cmapi.UsageDigitalSignature, cmapi.UsageServerAuth}
	clientUsages = []cmapi.KeyUsage{cmapi.UsageDigitalSignature, cmapi.UsageClientAuth}
	peerUsages   = []cmapi.KeyUsage{cmapi.UsageDigitalSignature, cmapi.UsageServerAuth, cmapi.UsageClientAuth}
	caUsages     = []cmapi.KeyUsage{cmapi.UsageCertSign, cmapi.UsageCRLSign, cmapi.UsageDigitalSignature}
)

// certDefs lists every certificate of the tenant in a fixed order: CAs first,
// so a reconciler that applies in order creates issuers' backing Secrets
// before the leaves that need them.
func (c *Cluster) certDefs() []certDef {
	ca, fp, etcd := c.signerIssuer(RoleCA), c.signerIssuer(RoleFrontProxyCA), c.signerIssuer(RoleEtcdCA)
	self := c.SelfSignedIssuerName()
	etcdDNS, etcdIPs := c.etcdSANs()
	apiDNS, apiIPs := c.APIServerSANs()
	extDNS, extIPs := c.externalSANs()
	var defs []certDef
	for _, d := range []certDef{
		{role: RoleCA, issuer: self, isCA: true, cn: "kubernetes-ca", usages: caUsages},
		{role: RoleFrontProxyCA, issuer: self, isCA: true, cn: "front-proxy-ca", usages: caUsages},
		{role: RoleEtcdCA, issuer: self, isCA: true, cn: "etcd-ca", usages: caUsages},
	} {
		defs = append(defs, c.caGenerations(d)...)
	}
	defs = append(defs, []certDef{
		{role: RoleServiceAccount, issuer: self, cn: "service-account-signer", usages: []cmapi.KeyUsage{cmapi.UsageDigitalSignature}, signingKey: true},

		{role: RoleAPIServer, issuer: ca, cn: "kube-apiserver", usages: serverUsages, dns: apiDNS, ips: apiIPs},
		{role: RoleAPIServerKubeletClient, issuer: ca, cn: UserKubeletClient, usages: clientUsages},
		{role: RoleControllerManager, issuer: ca, cn: "system:kube-controller-manager", usages: clientUsages},
		{role: RoleScheduler, issuer: ca, cn: "system:kube-scheduler", usages: clientUsages},
		{role: RoleKonnectivityServer, issuer: ca, cn: "konnectivity-server", usages: serverUsages, dns: extDNS, ips: extIPs},
		{role: RoleKonnectivityClient, issuer: ca, cn: UserKonnectivityServer, usages: clientUsages},
		{role: RoleAdmin, issuer: ca, cn: UserAdmin, orgs: []string{GroupClusterAdmins}, usages: clientUsages},
		{role: RoleSuperAdmin, issuer: ca, cn: UserSuperAdmin, orgs: []string{GroupMasters}, usages: clientUsages},
		{role: RoleTokenIssuer, issuer: ca, cn: UserTokenIssuer, usages: clientUsages},

		{role: RoleFrontProxyClient, issuer: fp, cn: FrontProxyClientName, usages: clientUsages},

		{role: RoleAPIServerEtcdClient, issuer: etcd, cn: "kube-apiserver-etcd-client", usages: clientUsages},
		// Client auth too: etcd's own gRPC gateway dials the member with
		// the server certificate, which without it logs a key-usage
		// rejection on every start.
		{role: RoleEtcdServer, issuer: etcd, cn: "etcd-server", usages: peerUsages, dns: etcdDNS, ips: etcdIPs},
		// Peers dial each other and accept each other's dials with the same
		// certificate, so it needs both usages.
		{role: RoleEtcdPeer, issuer: etcd, cn: "etcd-peer", usages: peerUsages, dns: etcdDNS, ips: etcdIPs},
	}...)
	// The leaves the tenant's nodes verify (NodeVerifiedLeaves) follow
	// the cluster CA's serving generation, which lags its signer during a
	// rotation until the nodes rebooted.
	for i := range defs {
		if slices.Contains(NodeVerifiedLeaves, defs[i].role) {
			defs[i].issuer = c.servingIssuer()
		}
	}
	if c.Backup != nil {
		// Its own identity, not the API server's etcd client certificate:
		// the backup's pods can be told apart in etcd's logs, and the
		// certificate goes away with the backup.
		defs = append(defs, certDef{role: RoleEtcdBackupClient, issuer: etcd, cn: "kubefarm-etcd-backup", usages: clientUsages})
	}
	return defs
}

// caGenerations is one definition per generation of a CA that must
// exist (CATrust.Generations): the first is d itself, a later one is
// named and labelled with its generation, and its common name carries it
// so that a person reading a chain can tell the two apart.
func (c *Cluster) caGenerations(d certDef) []certDef {
	var out []certDef
	for _, g := range c.CATrustOf(d.role).Generations() {
		gd := d
		if g > 1 {
			gd.generation, gd.cn = g, fmt.Sprintf("%s-%d", d.cn, g)
		}
		out = append(out, gd)
	}
	return out
}

// externalSANs are the names clients outside the tenant use for the API
// server Service: its admin-cluster DNS names, spec.apiServer.certSANs and the
// external address. Konnectivity agents dial the same Service, so the
// Konnectivity server certificate carries the same names.
func (c *Cluster) externalSANs() (dns, ips []string) {
	svc, ns := c.APIServerServiceName(), c.Namespace
	dns = []string{svc, svc + "." + ns, svc + "." + ns + ".svc", svc + "." + ns + ".svc." + c.AdminClusterDomain}
	for _, san := range append(slices.Clone(c.CertSANs), c.ExternalAddress) {
		if san == "" {
			continue
		}
		if a, err := netip.ParseAddr(san); err == nil {
			ips = append(ips, a.String())
		} else {
			dns = append(dns, san)
		}
	}
	return sortedUnique(dns), sortedUnique(ips)
}

// APIServerSANs are the DNS names and IP addresses of the API server's
// serving certificate: the external names plus the names tenant pods use
// (kubernetes.default...) and the tenant's kubernetes Service ClusterIP.
func (c *Cluster) APIServerSANs() (dns, ips []string) {
	dns, ips = c.externalSANs()
	dns = append(dns, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc."+c.ClusterDomain)
	ips = append(ips, c.APIServerServiceIP.String())
	return sortedUnique(dns), sortedUnique(ips)
}

// etcdSANs cover the headless Service and, by wildcard, every member's
// stable name, with and without the admin cluster's domain, plus loopback
// for tools run inside the pod. etcd checks a peer's address against the
// wildcard by reverse lookup of the peer IP, which the admin cluster's DNS
// answers with the member's headless-Service name (the Service publishes
// not-ready addresses so that this works before the member is ready).
func (c *Cluster) etcdSANs() (dns, ips []string) {
	svc, ns := c.EtcdServiceName(), c.Namespace
	fq := svc + "." + ns + ".svc"
	dns = []string{svc, svc + "." + ns, fq, fq + "." + c.AdminClusterDomain,
		"*." + fq, "*." + fq + "." + c.AdminClusterDomain, "localhost"}
	return sortedUnique(dns), []string{"127.0.0.1", "::1"}
}

func sortedUnique(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

// Issuers returns the Issuers of one tenant: a self-signed Issuer that signs
// the CAs, then one CA Issuer per CA. They are namespaced, never
// ClusterIssuers, so one tenant's CA can sign nothing in another namespace.
func Issuers(c *Cluster) []*cmapi.Issuer {
	mk := func(name string, cfg cmapi.IssuerConfig) *cmapi.Issuer {
		return &cmapi.Issuer{
			TypeMeta:   metav1.TypeMeta{APIVersion: cmapi.SchemeGroupVersion.String(), Kind: cmapi.IssuerKind},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: c.labels(componentPKI)},
			Spec:       cmapi.IssuerSpec{IssuerConfig: cfg},
		}
	}
	out := []*cmapi.Issuer{mk(c.SelfSignedIssuerName(), cmapi.IssuerConfig{SelfSigned: &cmapi.SelfSignedIssuer{}})}
	for _, ca := range []PKIRole{RoleCA, RoleFrontProxyCA, RoleEtcdCA} {
		for _, g := range c.CATrustOf(ca).Generations() {
			name := c.CAName(ca, g)
			out = append(out, mk(name, cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: name}}))
		}
	}
	return out
}

// Certificates returns every cert-manager Certificate of one tenant, CAs
// first. Each Secret gets the tenant's labels and its role through the
// secret template, so the reconciler can watch them by label.
func Certificates(c *Cluster) []*cmapi.Certificate {
	defs := c.certDefs()
	out := make([]*cmapi.Certificate, 0, len(defs))
	for _, d := range defs {
		out = append(out, c.certificateFor(d))
	}
	return out
}

// certificateFor turns one definition into a Certificate.
//
// The service-account signing key is a Certificate too, from the self-signed
// Issuer, and only its tls.key is used (kube-apiserver derives the public
// key from it for --service-account-key-file). Chosen over a Secret the
// controller fills with a generated key because the key then has the same
// lifecycle as every other tenant secret (created, labelled, backed up and
// restored the same way), the builders stay free of randomness, and nothing
// generates key material outside cert-manager. rotationPolicy Never is
// essential: a new key would invalidate every service-account token in the
// tenant at once; rotating it must be a deliberate, two-key procedure.
// RSA-2048 because RS256 is the one JWT algorithm every OIDC consumer of
// service-account tokens accepts.
func (c *Cluster) certificateFor(d certDef) *cmapi.Certificate {
	name := c.SecretName(d.role)
	labels := mergeLabels(c.labels(componentPKI), map[string]string{v1alpha1.LabelPKIRole: string(d.role)})
	if d.generation > 1 {
		name = c.CAName(d.role, d.generation)
		labels[v1alpha1.LabelCAGeneration] = strconv.Itoa(d.generation)
	}
	cert := &cmapi.Certificate{
		TypeMeta:   metav1.TypeMeta{APIVersion: cmapi.SchemeGroupVersion.String(), Kind: cmapi.CertificateKind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: labels},
		Spec: cmapi.CertificateSpec{
			SecretName:           name,
			SecretTemplate:       &cmapi.CertificateSecretTemplate{Labels: labels},
			CommonName:           d.cn,
			DNSNames:             d.dns,
			IPAddresses:          d.ips,
			IsCA:                 d.isCA,
			Usages:               slices.Clone(d.usages),
			IssuerRef:            cmmeta.IssuerReference{Name: d.issuer, Kind: cmapi.IssuerKind, Group: "cert-manager.io"},
			RevisionHistoryLimit: ptrTo(revisionHistoryKeep),
			// ECDSA P-256 for TLS: every component speaks it and handshakes
			// are cheaper than RSA at the same strength.
			PrivateKey: &cmapi.CertificatePrivateKey{
				Algorithm:      cmapi.ECDSAKeyAlgorithm,
				Size:           256,
				RotationPolicy: cmapi.RotationPolicyAlways,
			},
			Duration:    ptrTo(leafDuration),
			RenewBefore: ptrTo(leafRenewBefore),
		},
	}
	if len(d.orgs) > 0 {
		cert.Spec.Subject = &cmapi.X509Subject{Organizations: slices.Clone(d.orgs)}
	}
	if d.isCA {
		cert.Spec.PrivateKey.RotationPolicy = cmapi.RotationPolicyNever
		cert.Spec.Duration = ptrTo(caDuration)
		cert.Spec.RenewBefore = ptrTo(caRenewBefore)
	}
	if d.signingKey {
		cert.Spec.PrivateKey = &cmapi.CertificatePrivateKey{
			Algorithm:      cmapi.RSAKeyAlgorithm,
			Size:           2048,
			RotationPolicy: cmapi.RotationPolicyNever,
			Encoding:       cmapi.PKCS8,
		}
	}
	return cert
}

// CertificateFor returns the Certificate of one role, for callers that need a
// single one (e.g. to read its CommonName); it panics on an unknown role,
// which is a programming error.
func CertificateFor(c *Cluster, role PKIRole) *cmapi.Certificate {
	for _, d := range c.certDefs() {
		if d.role == role {
			return c.certificateFor(d)
		}
	}
	panic(fmt.Sprintf("unknown PKI role %q", role))
}

func ptrTo[T any](v T) *T { return &v }

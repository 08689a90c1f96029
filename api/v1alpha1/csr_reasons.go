package v1alpha1

// Reasons kubefarm writes on the Approved or Denied condition of a tenant's
// CertificateSigningRequests (controllers/csrapproval). Each names the first
// rule a request broke, so a denied request can be told apart in `kubectl get
// csr` without reading messages.

// Kubelet serving certificates.
const (
	ReasonCSRApproved       = "KubefarmMachineVerified"
	ReasonCSROtherSigner    = "NotKubeletServing"
	ReasonCSRAlreadyDecided = "AlreadyDecided"
	ReasonCSRNotANode       = "RequesterNotANode"
	ReasonCSRUnknownNode    = "NodeNotAMachine"
	ReasonCSRTooLarge       = "RequestTooLarge"
	ReasonCSRMalformed      = "MalformedRequest"
	ReasonCSRBadSignature   = "InvalidSignature"
	ReasonCSRWeakKey        = "UnsupportedKey"
	ReasonCSRSubject        = "SubjectMismatch"
	ReasonCSRUsages         = "ForbiddenUsages"
	ReasonCSRForeignSAN     = "ForeignSAN"
	ReasonCSRForbiddenSAN   = "ForbiddenSANType"
	ReasonCSRNoSAN          = "NoSAN"
)

// Kubelet client certificates asked for with a bootstrap token (the join).
const (
	ReasonCSRJoinApproved     = "KubefarmJoinTokenVerified"
	ReasonCSRNotKubeletClient = "NotKubeletClient"
	ReasonCSRNotBootstrap     = "NotBootstrapToken"
	ReasonCSRUnknownToken     = "UnknownBootstrapToken"
	ReasonCSRForeignToken     = "TokenNotKubefarms"
	ReasonCSRTokenExpired     = "BootstrapTokenExpired"
	ReasonCSRNoMachine        = "TokenMachineNotFound"
	ReasonCSRForeignMachine   = "TokenMachineOfAnotherTenant"
	ReasonCSRCommonName       = "CommonNameNotMachine"
	ReasonCSROrganization     = "OrganizationNotNodes"
	ReasonCSRExtraSubject     = "ExtraSubjectFields"
	ReasonCSRSANs             = "SANsNotAllowed"
	ReasonCSRClientUsages     = "NotKubeletClientUsages"
	ReasonCSRNotSelf          = "NodeAsksForAnotherName"
)

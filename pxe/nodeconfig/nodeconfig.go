// Package nodeconfig is the answer of kubefarm-pxe's GET /config/<mac>:
// what kubefarm-agent needs to make its machine a node of its tenant
// cluster. Both ends import it (kubefarm-pxe builds it, httpboot.NodeConfigFor;
// the agent renders it, agent/render); the rest of the boot protocol, which
// the node's initrd speaks too and which imports no API types, is package
// bootproto.
package nodeconfig

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
)

// NetworkUnavailableTaint keeps pods off a node until the agent has checked
// its CNI chain (ARCHITECTURE.md, boot step 4). The kubelet registers with
// it; the manager lifts it (controllers/machinenode) once the agent's
// report for the boot the node runs has made NetworkVerified True.
var NetworkUnavailableTaint = corev1.Taint{Key: kubefarmv1.TaintNetworkUnavailable, Effect: corev1.TaintEffectNoSchedule}

// NodeConfig is what kubefarm-agent fetches at /config/<mac> once per boot.
// It carries a join token: never log it whole.
type NodeConfig struct {
	Machine     string                 `json:"machine"`
	Cluster     string                 `json:"cluster"`
	Hostname    string                 `json:"hostname"`
	ImageDigest string                 `json:"imageDigest,omitempty"`
	Labels      map[string]string      `json:"labels,omitempty"`
	Taints      []corev1.Taint         `json:"taints"`
	Kubelet     kubefarmv1.KubeletSpec `json:"kubelet"`
	// Network is the machine's links (bonds, VLANs, MTU, addresses,
	// routes); nil leaves the node image's network files alone.
	Network *Network `json:"network,omitempty"`
	// RegistryMirrors are the pool's, for containerd's hosts.toml files.
	RegistryMirrors []kubefarmv1.RegistryMirror `json:"registryMirrors,omitempty"`
	// JoinToken is the bootstrap token for this machine alone.
	JoinToken string `json:"joinToken"`
	// RebootAfterLogin is the pool's rollout.rebootAfterLogin: how long
	// after the first interactive login the agent raises RebootRequired
	// (InteractiveLogin). Nil: never.
	RebootAfterLogin *metav1.Duration `json:"rebootAfterLogin,omitempty"`

	// The tenant cluster as its nodes see it (TenantFacts); empty when
	// kubefarm-pxe has no source for them, and then the agent cannot join.
	TenantFacts `json:",inline"`

	// The pool's spec.host (what kubefarm's ltsp.config carried), all
	// optional: the node's time zone (an IANA name such as Europe/Berlin),
	// the root account's SSH authorized keys and its password hash
	// (crypt(3) form, e.g. $6$...). The agent applies what is set.
	Timezone          string   `json:"timezone,omitempty"`
	SSHAuthorizedKeys []string `json:"sshAuthorizedKeys,omitempty"`
	RootPasswordHash  string   `json:"rootPasswordHash,omitempty"`
}

// TenantFacts are what a node needs to know of its tenant cluster to join
// it (bootstraptoken.NodeFacts: kubefarm-manager publishes them beside the
// token issuer's credential).
type TenantFacts = bootstraptoken.NodeFacts

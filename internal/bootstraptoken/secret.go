package bootstraptoken

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
)

// The Secret format read by kube-apiserver's authenticator and by
// kube-controller-manager's bootstrapsigner and tokencleaner
// (k8s.io/cluster-bootstrap/token/api, not a dependency of this module).
const (
	Namespace    = metav1.NamespaceSystem
	SecretPrefix = "bootstrap-token-"

	KeyID          = "token-id"
	KeySecret      = "token-secret"
	KeyExpiration  = "expiration"
	KeyDescription = "description"
	KeyExtraGroups = "auth-extra-groups"
	KeyUsageAuth   = "usage-bootstrap-authentication"
	KeyUsageSign   = "usage-bootstrap-signing"
)

// DefaultGroup is the extra group of kubefarm's node tokens; the tenant's
// RBAC lets it create CSRs and the CSR approver auto-approves them.
const DefaultGroup = "system:bootstrappers:kubefarm:default-node-token"

// Bounds on Options.
const (
	// MaxTTL: a token only has to live from issuing to the node's first
	// CSR, a boot away. A day covers a slow PXE chain and a weekend's queue
	// of reboots without leaving a credential lying around for weeks.
	MaxTTL = 24 * time.Hour
	// MaxDescriptionLength keeps the Secret readable; the description is
	// for people, not a place for data.
	MaxDescriptionLength = 256
)

// groupRE is the authenticator's own pattern: a group outside it makes the
// whole token invalid, so reject it when issuing, not at the node's first
// request.
var groupRE = regexp.MustCompile(`\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z`)

// Options describe a token to issue.
type Options struct {
	// Machine is the machine the token is for (label kubefarm.io/machine).
	// Required; it must be a valid label value.
	Machine string
	// TTL is how long the token is valid: more than zero, at most MaxTTL.
	TTL time.Duration
	// Now is the clock the expiration is computed from; nil is time.Now.
	Now func() time.Time
	// Description is for people; empty means one naming the machine.
	Description string
	// ExtraGroups the token authenticates with, beside
	// system:bootstrappers; empty means DefaultGroup. Each must start with
	// system:bootstrappers:.
	ExtraGroups []string
	// Signing also allows the token to sign the cluster-info ConfigMap
	// (usage-bootstrap-signing), which kubefarm's nodes do not need: they
	// receive the CA with their image.
	Signing bool
	// Rand is the random source for Issue; nil is crypto/rand.Reader.
	Rand io.Reader
}

// Validate checks opts as Issue does before any call.
func (o Options) Validate() error {
	var errs []error
	if o.Machine == "" {
		errs = append(errs, errors.New("machine is required"))
	} else if msgs := validation.IsValidLabelValue(o.Machine); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("machine %q is not a valid label value: %s", o.Machine, strings.Join(msgs, "; ")))
	}
	if o.TTL <= 0 || o.TTL > MaxTTL {
		errs = append(errs, fmt.Errorf("ttl %s must be more than 0 and at most %s", o.TTL, MaxTTL))
	}
	if n := len(o.Description); n > MaxDescriptionLength {
		errs = append(errs, fmt.Errorf("description is %d bytes long, at most %d", n, MaxDescriptionLength))
	}
	for _, g := range o.ExtraGroups {
		if !groupRE.MatchString(g) {
			errs = append(errs, fmt.Errorf("extra group %q must match %s", g, groupRE))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bootstrap token options: %w", err)
	}
	return nil
}

func (o Options) now() time.Time {
	if o.Now == nil {
		return time.Now()
	}
	return o.Now()
}

// SecretName is the name of the Secret of token id.
func SecretName(id string) string { return SecretPrefix + id }

// Secret builds kube-system/bootstrap-token-<id> for tok. It is pure but for
// opts.Now and assumes opts passed Validate; Issue checks both.
func Secret(tok Token, opts Options) *corev1.Secret {
	description := opts.Description
	if description == "" {
		description = "kubefarm bootstrap token for machine " + opts.Machine
	}
	groups := opts.ExtraGroups
	if len(groups) == 0 {
		groups = []string{DefaultGroup}
	}
	secret := ""
	if tok.secret != nil {
		secret = *tok.secret
	}
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      SecretName(tok.ID),
			Namespace: Namespace,
			Labels:    map[string]string{v1alpha1.LabelMachine: opts.Machine},
		},
		Type: corev1.SecretTypeBootstrapToken,
		Data: map[string][]byte{
			KeyID:          []byte(tok.ID),
			KeySecret:      []byte(secret),
			KeyExpiration:  []byte(opts.now().Add(opts.TTL).UTC().Format(time.RFC3339)),
			KeyDescription: []byte(description),
			KeyExtraGroups: []byte(strings.Join(groups, ",")),
			KeyUsageAuth:   []byte("true"),
			KeyUsageSign:   []byte(fmt.Sprint(opts.Signing)),
		},
	}
}

package bootstraptoken

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
)

// maxAttempts bounds Issue's retries on an id already taken. With 36^6
// (about 2e9) ids a second collision in a row means the random source is
// broken, not unlucky.
const maxAttempts = 5

// No kubebuilder RBAC marker here on purpose: c is a client of the tenant
// cluster, with the tenant's credentials. A marker would grant the manager
// Secret deletion in the admin cluster, which it does not need.

// Issue creates a new token's Secret. It only ever creates: an id that is
// already taken draws a new token rather than overwriting someone else's
// Secret. The returned Token is the only copy of the secret kubefarm keeps
// in memory; the Secret in the cluster is the other.
func Issue(ctx context.Context, c client.Client, opts Options) (Token, error) {
	if err := opts.Validate(); err != nil {
		return Token{}, err
	}
	r := opts.Rand
	if r == nil {
		r = rand.Reader
	}
	for range maxAttempts {
		tok, err := Generate(r)
		if err != nil {
			return Token{}, err
		}
		err = c.Create(ctx, Secret(tok, opts))
		switch {
		case err == nil:
			return tok, nil
		case apierrors.IsAlreadyExists(err):
			continue
		default:
			// The error names the Secret, which holds only the id.
			return Token{}, fmt.Errorf("creating bootstrap token %s for machine %s: %w", tok, opts.Machine, err)
		}
	}
	return Token{}, fmt.Errorf("creating a bootstrap token for machine %s: %d ids in a row were taken", opts.Machine, maxAttempts)
}

// Revoke and Prune need to delete (and Prune to list) Secrets of
// kube-system, which the token issuer may not: kubefarm-pxe only issues.
// A used token is deleted by kubefarm-manager's CSR approval, an unused one
// by kube-controller-manager's tokencleaner once it expires. They remain
// for clients with those rights (an operator's tooling, tests).

// Revoke deletes the token with id; a token already gone is not an error,
// so revoking twice (or after the tokencleaner) is fine. kube-apiserver
// caches successful token authentications (10 seconds by default), so a
// client that used the token a moment ago keeps being accepted that long.
func Revoke(ctx context.Context, c client.Client, id string) error {
	if !idRE.MatchString(id) {
		return fmt.Errorf("revoking bootstrap token: id %q is not [a-z0-9]{6}", id)
	}
	s := &corev1.Secret{}
	s.Namespace, s.Name = Namespace, SecretName(id)
	if err := c.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("revoking bootstrap token %s: %w", id, err)
	}
	return nil
}

// Prune deletes kubefarm's tokens (those with v1alpha1.LabelMachine) that expired at
// now, and returns the ids it deleted. kube-controller-manager's
// tokencleaner does the same for every token, but on its own schedule and
// only where it runs; Prune makes it immediate. An unparseable expiration
// counts as expired, as it does for the authenticator. c should read the API
// server, or a cache that holds kube-system's Secrets.
func Prune(ctx context.Context, c client.Client, now time.Time) ([]string, error) {
	var list corev1.SecretList
	if err := c.List(ctx, &list, client.InNamespace(Namespace), client.HasLabels{v1alpha1.LabelMachine}); err != nil {
		return nil, fmt.Errorf("listing bootstrap tokens: %w", err)
	}
	var pruned []string
	var errs []error
	for i := range list.Items {
		s := &list.Items[i]
		if s.Type != corev1.SecretTypeBootstrapToken || !Expired(s, now) {
			continue
		}
		// The UID precondition keeps a token re-issued under the same
		// name meanwhile from being deleted in its place.
		err := c.Delete(ctx, s, client.Preconditions{UID: &s.UID})
		switch {
		case err == nil:
			pruned = append(pruned, strings.TrimPrefix(s.Name, SecretPrefix))
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		default:
			errs = append(errs, fmt.Errorf("deleting %s: %w", s.Name, err))
		}
	}
	return pruned, errors.Join(errs...)
}

// Expired says whether token Secret s has expired at now. It follows the
// authenticator: no expiration never expires, an unparseable one has.
func Expired(s *corev1.Secret, now time.Time) bool {
	exp, ok := s.Data[KeyExpiration]
	if !ok || len(exp) == 0 {
		return false
	}
	t, err := time.Parse(time.RFC3339, string(exp))
	return err != nil || !t.After(now)
}

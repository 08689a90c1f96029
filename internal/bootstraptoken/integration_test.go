package bootstraptoken_test

import (
	"context"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// TestAuthenticatesAgainstAPIServer issues tokens in a real kube-apiserver
// started with --enable-bootstrap-token-auth and authenticates with nothing
// but the token, as a node's kubelet does before it has a certificate.
func TestAuthenticatesAgainstAPIServer(t *testing.T) {
	env := testenv.StartT(t, testenv.Options{APIServerFlags: map[string]string{"enable-bootstrap-token-auth": "true"}})
	ctx := context.Background()

	// whoami asks the API server who the bearer of tok is.
	whoami := func(tok bootstraptoken.Token) (*authenticationv1.SelfSubjectReview, error) {
		cfg := rest.AnonymousClientConfig(env.Config) // the CA, no client certificate
		cfg.BearerToken = tok.Value()
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	}
	// The authenticator reads Secrets through an informer, and the API
	// server caches successful token authentications for 10 seconds: a new
	// token works once its event arrived, a revoked one stops working up to
	// ten seconds later.
	eventually := func(what string, cond func() (bool, error)) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true,
			func(context.Context) (bool, error) { return cond() }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	unauthorized := func(tok bootstraptoken.Token) func() (bool, error) {
		return func() (bool, error) {
			_, err := whoami(tok)
			if err != nil && !apierrors.IsUnauthorized(err) {
				return false, err
			}
			return apierrors.IsUnauthorized(err), nil
		}
	}

	// An expired token, issued first: once the valid one below
	// authenticates, the informer has seen this one too (events arrive in
	// order), so its rejection is the authenticator's verdict.
	expired, err := bootstraptoken.Issue(ctx, env.Client, bootstraptoken.Options{
		Machine: "m-expired", TTL: time.Hour, Now: func() time.Time { return time.Now().Add(-2 * time.Hour) },
	})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := bootstraptoken.Issue(ctx, env.Client, bootstraptoken.Options{Machine: "m1", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}

	var review *authenticationv1.SelfSubjectReview
	eventually("the token never authenticated", func() (bool, error) {
		review, err = whoami(tok)
		if apierrors.IsUnauthorized(err) {
			return false, nil
		}
		return err == nil, err
	})
	user := review.Status.UserInfo
	if want := "system:bootstrap:" + tok.ID; user.Username != want {
		t.Errorf("authenticated as %q, want %q", user.Username, want)
	}
	for _, g := range []string{"system:bootstrappers", bootstraptoken.DefaultGroup} {
		if !slices.Contains(user.Groups, g) {
			t.Errorf("groups %v lack %s", user.Groups, g)
		}
	}

	t.Run("an expired token is rejected", func(t *testing.T) {
		if _, err := whoami(expired); !apierrors.IsUnauthorized(err) {
			t.Fatalf("an expired token got %v, want 401 Unauthorized", err)
		}
	})

	t.Run("Prune deletes only the expired token", func(t *testing.T) {
		pruned, err := bootstraptoken.Prune(ctx, env.Client, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(pruned, []string{expired.ID}) {
			t.Errorf("pruned %v, want [%s]", pruned, expired.ID)
		}
		if _, err := whoami(tok); err != nil {
			t.Errorf("the valid token stopped working after Prune: %v", err)
		}
	})

	t.Run("a revoked token is rejected", func(t *testing.T) {
		if err := bootstraptoken.Revoke(ctx, env.Client, tok.ID); err != nil {
			t.Fatal(err)
		}
		eventually("the revoked token kept authenticating", unauthorized(tok))
	})
}

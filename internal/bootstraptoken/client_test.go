package bootstraptoken_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
)

// TestIssueNeverOverwrites: the first id drawn is taken, so Issue draws
// again and leaves the existing Secret as it was.
func TestIssueNeverOverwrites(t *testing.T) {
	ctx := context.Background()
	taken := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap-token-aaaaaa"},
		Type:       corev1.SecretTypeBootstrapToken,
		Data:       map[string][]byte{"token-id": []byte("aaaaaa"), "token-secret": []byte("someone-elses")},
	}
	c := fake.NewClientBuilder().WithObjects(taken).Build()
	// 32 zero bytes draw aaaaaa.aaaaaaaaaaaaaaaa, 32 ones bbbbbb.bbbbbbbbbbbbbbbb.
	src := bytes.NewReader(append(make([]byte, 32), bytes.Repeat([]byte{1}, 32)...))
	tok, err := bootstraptoken.Issue(ctx, c, bootstraptoken.Options{Machine: "m1", TTL: time.Hour, Now: clock, Rand: src})
	if err != nil {
		t.Fatal(err)
	}
	if tok.Value() != "bbbbbb.bbbbbbbbbbbbbbbb" {
		t.Errorf("issued %q, want the second draw", tok.Value())
	}
	got := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "bootstrap-token-aaaaaa"}, got); err != nil {
		t.Fatal(err)
	}
	if string(got.Data["token-secret"]) != "someone-elses" {
		t.Error("the taken Secret was overwritten")
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "bootstrap-token-bbbbbb"}, got); err != nil {
		t.Fatal(err)
	}
	if got.Labels["kubefarm.io/machine"] != "m1" || string(got.Data["token-secret"]) != "bbbbbbbbbbbbbbbb" {
		t.Errorf("issued Secret = %v", got)
	}

	// Every draw taken: Issue gives up after a bounded number of tries.
	_, err = bootstraptoken.Issue(ctx, c, bootstraptoken.Options{Machine: "m1", TTL: time.Hour, Rand: bytes.NewReader(make([]byte, 32*5))})
	if err == nil || !strings.Contains(err.Error(), "5 ids in a row were taken") {
		t.Errorf("Issue with a stuck random source: %v", err)
	}
}

func TestIssueValidatesFirst(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	_, err := bootstraptoken.Issue(context.Background(), c, bootstraptoken.Options{Machine: "m1", TTL: 48 * time.Hour})
	if err == nil || !strings.Contains(err.Error(), "at most 24h") {
		t.Fatalf("Issue with a 48h TTL: %v", err)
	}
	var list corev1.SecretList
	if err := c.List(context.Background(), &list); err != nil || len(list.Items) != 0 {
		t.Errorf("invalid options still created %d Secrets (%v)", len(list.Items), err)
	}
}

func TestRevoke(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().Build()
	tok, err := bootstraptoken.Issue(ctx, c, bootstraptoken.Options{Machine: "m1", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := bootstraptoken.Revoke(ctx, c, tok.ID); err != nil {
			t.Fatal(err)
		}
	}
	var list corev1.SecretList
	if err := c.List(ctx, &list); err != nil || len(list.Items) != 0 {
		t.Errorf("%d Secrets left after Revoke (%v)", len(list.Items), err)
	}
	if err := bootstraptoken.Revoke(ctx, c, "../etc"); err == nil {
		t.Error("Revoke accepted a malformed id")
	}
}

func TestPrune(t *testing.T) {
	ctx := context.Background()
	now := fixedNow
	secret := func(id, expiration string, labelled bool, typ corev1.SecretType) *corev1.Secret {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap-token-" + id},
			Type:       typ,
			Data:       map[string][]byte{"token-id": []byte(id)},
		}
		if expiration != "" {
			s.Data["expiration"] = []byte(expiration)
		}
		if labelled {
			s.Labels = map[string]string{"kubefarm.io/machine": "m-" + id}
		}
		return s
	}
	tokenType := corev1.SecretTypeBootstrapToken
	past := now.Add(-time.Minute).UTC().Format(time.RFC3339)
	future := now.Add(time.Minute).UTC().Format(time.RFC3339)
	c := fake.NewClientBuilder().WithObjects(
		secret("expird", past, true, tokenType),
		secret("atnoww", now.UTC().Format(time.RFC3339), true, tokenType),
		secret("garble", "tomorrow", true, tokenType),
		secret("valid1", future, true, tokenType),
		secret("never1", "", true, tokenType),
		secret("foreig", past, false, tokenType),              // not kubefarm's: the tokencleaner's business
		secret("opaque", past, true, corev1.SecretTypeOpaque), // not a token at all
	).Build()
	pruned, err := bootstraptoken.Prune(ctx, c, now)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(pruned)
	if want := []string{"atnoww", "expird", "garble"}; !slices.Equal(pruned, want) {
		t.Errorf("pruned %v, want %v", pruned, want)
	}
	var list corev1.SecretList
	if err := c.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, s := range list.Items {
		left = append(left, s.Name)
	}
	slices.Sort(left)
	if want := []string{"bootstrap-token-foreig", "bootstrap-token-never1", "bootstrap-token-opaque", "bootstrap-token-valid1"}; !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
}

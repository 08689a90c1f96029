// Package bootstraptoken issues, revokes and prunes Kubernetes bootstrap
// tokens with plain API calls: a Secret of type bootstrap.kubernetes.io/token
// in kube-system, which kube-apiserver's bootstrap token authenticator
// (--enable-bootstrap-token-auth) reads. kubeadm is not involved: kubefarm's
// nodes are diskless and get their token from the boot chain, per machine,
// so each Secret carries the machine's name to be found and revoked.
//
// A token is a credential. Token prints redacted everywhere (fmt, slog,
// logr, JSON); only Value returns the whole token.
package bootstraptoken

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
)

const (
	// IDLength and SecretLength are fixed by the bootstrap token format,
	// [a-z0-9]{6}.[a-z0-9]{16}.
	IDLength     = 6
	SecretLength = 16

	// alphabet is the token alphabet of the format.
	alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	// redacted stands in for the secret in every printed form.
	redacted = "<redacted>"
)

var (
	idRE    = regexp.MustCompile(`\A[a-z0-9]{6}\z`)
	tokenRE = regexp.MustCompile(`\A([a-z0-9]{6})\.([a-z0-9]{16})\z`)
)

// ValidID says whether id is a token id, [a-z0-9]{6}: what follows
// system:bootstrap: in the user name of a token's bearer, and
// bootstrap-token- in the name of its Secret.
func ValidID(id string) bool { return idRE.MatchString(id) }

// Token is a bootstrap token, id.secret. The id is public (it names the
// Secret and the user system:bootstrap:<id>); the secret is not.
//
// The secret sits behind a pointer in an unexported field: when a Token is
// printed as a field of another struct that fmt cannot call methods on (an
// unexported field), or with a verb that skips String (%d), fmt shows the
// pointer's address, never the secret.
type Token struct {
	ID     string
	secret *string
}

// Generate draws a token from rand (crypto/rand.Reader outside tests). Each
// character is uniform over [a-z0-9]: bytes of 252 and above are dropped so
// that byte % 36 has no bias (252 = 7 * 36).
func Generate(rand io.Reader) (Token, error) {
	if rand == nil {
		return Token{}, errors.New("bootstrap token: no random source")
	}
	out := make([]byte, 0, IDLength+SecretLength)
	buf := make([]byte, 32)
	for len(out) < cap(out) {
		n, err := io.ReadFull(rand, buf)
		if err != nil {
			return Token{}, fmt.Errorf("bootstrap token: reading random bytes: %w", err)
		}
		for _, b := range buf[:n] {
			if b < 252 && len(out) < cap(out) {
				out = append(out, alphabet[int(b)%len(alphabet)])
			}
		}
	}
	secret := string(out[IDLength:])
	return Token{ID: string(out[:IDLength]), secret: &secret}, nil
}

// Parse reads id.secret, as a kubelet's bootstrap kubeconfig carries it. The
// error never repeats the input, which may be a real token.
func Parse(s string) (Token, error) {
	m := tokenRE.FindStringSubmatch(s)
	if m == nil {
		return Token{}, errors.New("bootstrap token: not of the form [a-z0-9]{6}.[a-z0-9]{16}")
	}
	secret := m[2]
	return Token{ID: m[1], secret: &secret}, nil
}

// Value is the whole token, id.secret: the bearer credential. Pass it only
// to what authenticates with it (a bootstrap kubeconfig, a boot artifact).
// It is "" for the zero Token.
func (t Token) Value() string {
	if t.secret == nil {
		return ""
	}
	return t.ID + "." + *t.secret
}

// String is the token with its secret redacted, id.<redacted>, so that %v,
// %s, %q and %x, of a Token or a *Token, are safe in logs and errors.
func (t Token) String() string { return t.ID + "." + redacted }

// GoString serves %#v, which would otherwise print the fields.
func (t Token) GoString() string {
	return fmt.Sprintf("bootstraptoken.Token{ID:%q, secret:%s}", t.ID, redacted)
}

// LogValue keeps log/slog from printing the fields.
func (t Token) LogValue() slog.Value { return slog.StringValue(t.String()) }

// MarshalLog keeps logr sinks (controller-runtime's zap among them) from
// printing the fields; it is logr.Marshaler without importing logr.
func (t Token) MarshalLog() any { return t.String() }

// MarshalText serves encoding/json and everything else that asks a value for
// its text: the redacted form. Value is the only way to the secret.
func (t Token) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

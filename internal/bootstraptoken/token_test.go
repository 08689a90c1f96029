package bootstraptoken_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	crzap "sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
)

var formatRE = regexp.MustCompile(`\A[a-z0-9]{6}\.[a-z0-9]{16}\z`)

func TestGenerateFormat(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		tok, err := bootstraptoken.Generate(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		if !formatRE.MatchString(tok.Value()) {
			t.Fatalf("token %q is not [a-z0-9]{6}.[a-z0-9]{16}", tok.Value())
		}
		if seen[tok.ID] {
			t.Fatalf("id %s drawn twice in 200 tokens", tok.ID)
		}
		seen[tok.ID] = true
	}
}

// TestGenerateDeterministic: the characters are byte % 36, and bytes of 252
// and above (which would favour a-d) are skipped.
func TestGenerateDeterministic(t *testing.T) {
	src := append(bytes.Repeat([]byte{255, 252}, 16), bytes.Repeat([]byte{35 + 36}, 32)...)
	tok, err := bootstraptoken.Generate(bytes.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.Value(), "999999.9999999999999999"; got != want {
		t.Errorf("Generate = %q, want %q", got, want)
	}
	tok, err = bootstraptoken.Generate(bytes.NewReader(bytes.Repeat([]byte{0, 1, 26, 251}, 8)))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.Value(), "ab09ab.09ab09ab09ab09ab"; got != want {
		t.Errorf("Generate = %q, want %q", got, want)
	}
}

func TestGenerateFailures(t *testing.T) {
	if _, err := bootstraptoken.Generate(bytes.NewReader(make([]byte, 10))); err == nil {
		t.Error("a short random source was accepted")
	}
	if _, err := bootstraptoken.Generate(nil); err == nil {
		t.Error("a nil random source was accepted")
	}
}

func TestParse(t *testing.T) {
	tok, err := bootstraptoken.Parse("abcdef.0123456789abcdef")
	if err != nil || tok.ID != "abcdef" || tok.Value() != "abcdef.0123456789abcdef" {
		t.Fatalf("Parse = %v (%q), %v", tok, tok.Value(), err)
	}
	for _, bad := range []string{"", "abcdef", "abcdef.0123456789abcde", "ABCDEF.0123456789abcdef", "abcdef.0123456789abcdef\n", "abcdefg.0123456789abcdef"} {
		_, err := bootstraptoken.Parse(bad)
		if err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		} else if bad != "" && strings.Contains(err.Error(), bad) {
			t.Errorf("Parse error repeats its input: %v", err)
		}
	}
	if (bootstraptoken.Token{}).Value() != "" {
		t.Error("the zero Token has a value")
	}
}

// TestRedaction prints a token every way a log line or an error could, and
// checks the secret shows up in none of them.
func TestRedaction(t *testing.T) {
	tok, err := bootstraptoken.Parse("abcdef.0123456789uvwxyz")
	if err != nil {
		t.Fatal(err)
	}
	const secret = "0123456789uvwxyz"
	type exported struct{ Tok bootstraptoken.Token }
	type unexported struct{ tok bootstraptoken.Token }

	var outputs []string
	add := func(s string) { outputs = append(outputs, s) }
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T"} {
		add(fmt.Sprintf(verb, tok))
		add(fmt.Sprintf(verb, &tok))
		add(fmt.Sprintf(verb, exported{tok}))
		add(fmt.Sprintf(verb, unexported{tok}))
		add(fmt.Sprintf(verb, []bootstraptoken.Token{tok}))
		add(fmt.Sprintf(verb, map[string]any{"token": tok}))
	}
	add(fmt.Errorf("issuing %v: %w", tok, errors.New("boom")).Error())
	for _, v := range []any{tok, &tok, exported{tok}, unexported{tok}} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		add(string(b))
	}

	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("issued", "token", tok, "ptr", &tok, "nested", exported{tok})
	slog.New(slog.NewTextHandler(&buf, nil)).Info("issued", "token", tok, "nested", exported{tok})
	funcr.New(func(prefix, args string) { buf.WriteString(args) }, funcr.Options{}).
		Info("issued", "token", tok, "ptr", &tok, "nested", exported{tok}, "hidden", unexported{tok})
	// controller-runtime's logger, which the manager logs through.
	crzap.New(crzap.WriteTo(&buf)).Info("issued", "token", tok, "ptr", &tok, "nested", exported{tok})
	add(buf.String())

	for _, out := range outputs {
		if strings.Contains(out, secret) || strings.Contains(strings.ToLower(out), hex.EncodeToString([]byte(secret))) {
			t.Errorf("the secret leaked: %s", out)
		}
	}
	if got := tok.String(); got != "abcdef.<redacted>" {
		t.Errorf("String = %q", got)
	}
	if got := fmt.Sprintf("%#v", tok); got != `bootstraptoken.Token{ID:"abcdef", secret:<redacted>}` {
		t.Errorf("GoString = %q", got)
	}
	if !strings.Contains(buf.String(), "abcdef.<redacted>") {
		t.Errorf("the logs do not even name the token id:\n%s", buf.String())
	}
}

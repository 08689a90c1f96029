package bootstraptoken_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
)

var fixedNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("CET", 3600))

func clock() time.Time { return fixedNow }

func mustParse(t *testing.T, s string) bootstraptoken.Token {
	t.Helper()
	tok, err := bootstraptoken.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestSecretDefaults(t *testing.T) {
	tok := mustParse(t, "abcdef.0123456789abcdef")
	s := bootstraptoken.Secret(tok, bootstraptoken.Options{Machine: "m1", TTL: 2 * time.Hour, Now: clock})
	if s.Namespace != "kube-system" || s.Name != "bootstrap-token-abcdef" {
		t.Errorf("Secret is %s/%s", s.Namespace, s.Name)
	}
	if s.Type != corev1.SecretType("bootstrap.kubernetes.io/token") {
		t.Errorf("type = %s", s.Type)
	}
	if got := s.Labels["kubefarm.io/machine"]; got != "m1" || len(s.Labels) != 1 {
		t.Errorf("labels = %v", s.Labels)
	}
	want := map[string]string{
		"token-id":                       "abcdef",
		"token-secret":                   "0123456789abcdef",
		"expiration":                     "2026-03-01T13:00:00Z", // 12:00 CET + 2h, in UTC
		"description":                    "kubefarm bootstrap token for machine m1",
		"auth-extra-groups":              "system:bootstrappers:kubefarm:default-node-token",
		"usage-bootstrap-authentication": "true",
		"usage-bootstrap-signing":        "false",
	}
	if len(s.Data) != len(want) || len(s.StringData) != 0 {
		t.Errorf("data has keys %v, want exactly %v", keys(s.Data), want)
	}
	for k, v := range want {
		if got := string(s.Data[k]); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

func TestSecretOptions(t *testing.T) {
	tok := mustParse(t, "zzzzzz.0123456789abcdef")
	s := bootstraptoken.Secret(tok, bootstraptoken.Options{
		Machine: "rack1-node7", TTL: 24 * time.Hour, Now: clock, Description: "re-image of rack 1",
		ExtraGroups: []string{"system:bootstrappers:kubefarm:pool-a", "system:bootstrappers:other"},
		Signing:     true,
	})
	for k, v := range map[string]string{
		"expiration":              "2026-03-02T11:00:00Z",
		"description":             "re-image of rack 1",
		"auth-extra-groups":       "system:bootstrappers:kubefarm:pool-a,system:bootstrappers:other",
		"usage-bootstrap-signing": "true",
	} {
		if got := string(s.Data[k]); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	// Pure: the same input builds the same Secret.
	again := bootstraptoken.Secret(tok, bootstraptoken.Options{
		Machine: "rack1-node7", TTL: 24 * time.Hour, Now: clock, Description: "re-image of rack 1",
		ExtraGroups: []string{"system:bootstrappers:kubefarm:pool-a", "system:bootstrappers:other"},
		Signing:     true,
	})
	if !reflect.DeepEqual(s, again) {
		t.Error("the builder is not deterministic")
	}
}

func TestValidate(t *testing.T) {
	ok := bootstraptoken.Options{Machine: "m1", TTL: time.Hour}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid options rejected: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*bootstraptoken.Options)
		want string
	}{
		{"zero TTL", func(o *bootstraptoken.Options) { o.TTL = 0 }, "ttl 0s must be more than 0 and at most 24h0m0s"},
		{"negative TTL", func(o *bootstraptoken.Options) { o.TTL = -time.Minute }, "ttl -1m0s"},
		{"TTL above a day", func(o *bootstraptoken.Options) { o.TTL = 24*time.Hour + time.Second }, "at most 24h0m0s"},
		{"TTL of exactly a day", func(o *bootstraptoken.Options) { o.TTL = 24 * time.Hour }, ""},
		{"description at the limit", func(o *bootstraptoken.Options) { o.Description = strings.Repeat("d", 256) }, ""},
		{"description too long", func(o *bootstraptoken.Options) { o.Description = strings.Repeat("d", 257) }, "description is 257 bytes long, at most 256"},
		{"no machine", func(o *bootstraptoken.Options) { o.Machine = "" }, "machine is required"},
		{"machine not a label value", func(o *bootstraptoken.Options) { o.Machine = "rack 1/node" }, "not a valid label value"},
		{"group without the prefix", func(o *bootstraptoken.Options) { o.ExtraGroups = []string{"system:nodes"} }, `extra group "system:nodes" must match`},
		{"group that is only the prefix", func(o *bootstraptoken.Options) { o.ExtraGroups = []string{"system:bootstrappers:"} }, "must match"},
		{"group with upper case", func(o *bootstraptoken.Options) { o.ExtraGroups = []string{"system:bootstrappers:Pool"} }, "must match"},
		{"the bare bootstrappers group", func(o *bootstraptoken.Options) { o.ExtraGroups = []string{"system:bootstrappers"} }, "must match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.edit(&o)
			err := o.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("accepted, want %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

package etcdsnapshot

import (
	"strings"
	"testing"
)

func TestParseEncrypted(t *testing.T) {
	for _, tc := range []struct {
		name, value         string
		ok                  bool
		provider, key, data string
	}{
		{"secretbox", "k8s:enc:secretbox:v1:key-2:\x00nonce-and-box", true, "secretbox:v1", "key-2", "\x00nonce-and-box"},
		{"kms v2", "k8s:enc:kms:v2:vault:data", true, "kms:v2", "vault", "data"},
		{"data holding colons", "k8s:enc:aescbc:v1:key-1:a:b:c", true, "aescbc:v1", "key-1", "a:b:c"},
		{"empty data", "k8s:enc:secretbox:v1:key-1:", true, "secretbox:v1", "key-1", ""},
		{"in the clear", `{"kind":"Secret"}`, false, "", "", ""},
		{"protobuf in the clear", "k8s\x00\n\x0c\n\x02v1", false, "", "", ""},
		{"no key name", "k8s:enc:secretbox:v1:", false, "", "", ""},
		{"an empty field", "k8s:enc::v1:key-1:x", false, "", "", ""},
		{"a control byte in the name", "k8s:enc:secretbox:v1:key\n1:x", false, "", "", ""},
		{"a field over 64 bytes", "k8s:enc:secretbox:v1:" + strings.Repeat("a", 65) + ":x", false, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, ok := parseEncrypted([]byte(tc.value))
			if ok != tc.ok || ev.Provider != tc.provider || ev.Key != tc.key || string(ev.Data) != tc.data {
				t.Errorf("parseEncrypted(%q) = %+v, %v; want %s %s %q, %v", tc.value, ev, ok, tc.provider, tc.key, tc.data, tc.ok)
			}
		})
	}
}

package backupkeys_test

import (
	"bytes"
	"maps"
	"strings"
	"testing"

	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/backupkeys"
)

// key is a key of backupkeys.KeySize bytes of b. (This file is an external
// test package: desired, whose rendering it reads back, imports backupkeys.)
func key(b byte) []byte { return bytes.Repeat([]byte{b}, backupkeys.KeySize) }

// TestFromEncryptionConfiguration reads back what the tenant controller
// renders: mid-rotation the write key is the promoted one and both keys
// are there; and refuses what it does not render.
func TestFromEncryptionConfiguration(t *testing.T) {
	rendered := desired.EncryptionKeys{Write: "key-2", Stage: desired.RotationPromoted,
		Keys: map[string][]byte{"key-1": key(1), "key-2": key(2)}}
	b, err := desired.EncryptionConfiguration(rendered)
	if err != nil {
		t.Fatal(err)
	}
	write, keys, err := backupkeys.FromEncryptionConfiguration(b)
	if err != nil || write != "key-2" || !maps.EqualFunc(keys, rendered.Keys, func(a, b []byte) bool { return string(a) == string(b) }) {
		t.Fatalf("read back write %q keys %v (%v), want key-2 and the rendered keys", write, keys, err)
	}
	if err := (backupkeys.Keys{SnapshotSHA256: strings.Repeat("ab", 32), Write: write, Keys: keys}).Validate(); err != nil {
		t.Errorf("what it reads does not make a valid key file: %v", err)
	}
	for _, tc := range []struct{ name, cfg, want string }{
		{"not JSON", "resources: []", "encryption configuration"},
		{"another kind", `{"kind":"Config","apiVersion":"apiserver.config.k8s.io/v1","resources":[]}`, `kind "Config"`},
		{"an unknown field", strings.Replace(string(b), `"resources":`, `"extra":1,"resources":`, 1), "unknown field"},
		{"more resources", strings.Replace(string(b), `["secrets"]`, `["secrets","configmaps"]`, 1), "resources must be [secrets]"},
		{"aescbc", strings.Replace(string(b), `"secretbox"`, `"aescbc"`, 1), "providers[0]: kubefarm renders one secretbox provider"},
		{"identity alone", `{"kind":"EncryptionConfiguration","apiVersion":"apiserver.config.k8s.io/v1","resources":[{"resources":["secrets"],"providers":[{"identity":{}}]}]}`, "no secretbox keys"},
		{"a secret not base64", strings.Replace(string(b), `"secret":"`, `"secret":"!`, 1), "keys[0] (\"key-2\"): secret is not base64"},
		{"too large", string(b) + strings.Repeat(" ", backupkeys.MaxFileSize), "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := backupkeys.FromEncryptionConfiguration([]byte(tc.cfg))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, want an error containing %q", err, tc.want)
			}
		})
	}
}

package backupkeys

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"golang.org/x/crypto/nacl/secretbox"
)

func identity(t testing.TB) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func key(b byte) []byte { return bytes.Repeat([]byte{b}, KeySize) }

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// keys is a snapshot taken mid-rotation: two keys, the newer one writing.
func keys() Keys {
	return Keys{
		Tenant: "team-a/prod", SnapshotSHA256: digest("snapshot"),
		TakenAt: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC),
		Write:   "key-2", Keys: map[string][]byte{"key-1": key(1), "key-2": key(2)},
	}
}

func seal(t *testing.T, k Keys, recipients ...age.Recipient) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Seal(&buf, k, recipients...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sealRaw seals any JSON, for files Seal itself would refuse to write.
func sealRaw(t *testing.T, plain []byte, r age.Recipient) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := age.Encrypt(&buf, r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(plain); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sample is a value as kube-apiserver's secretbox provider stores it
// (random nonce, then the box), encrypted with k and named name.
func sample(t *testing.T, name string, k []byte) Sample {
	t.Helper()
	var nonce [24]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		t.Fatal(err)
	}
	var kk [KeySize]byte
	copy(kk[:], k)
	return Sample{Object: "/registry/secrets/default/" + name, Provider: Provider, Key: name,
		Data: secretbox.Seal(nonce[:], []byte("a Secret"), &nonce, &kk)}
}

func reason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// TestRoundTrip: what Seal writes, Open gives back whole, with any of the
// recipients' identities (an operator may seal to a second, offline key),
// and the file is a standard age file that carries no key in the clear.
func TestRoundTrip(t *testing.T) {
	primary, offline := identity(t), identity(t)
	sealed := seal(t, keys(), primary.Recipient(), offline.Recipient())
	for name, id := range map[string]*age.X25519Identity{"primary": primary, "offline": offline} {
		got, err := Open(bytes.NewReader(sealed), id)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if want := keys(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: opened %+v, want %+v", name, got, want)
		}
	}
	if !bytes.HasPrefix(sealed, []byte("age-encryption.org/v1\n")) {
		t.Errorf("not an age file: %q", sealed[:min(len(sealed), 40)])
	}
	for _, k := range keys().Keys {
		if bytes.Contains(sealed, k) {
			t.Error("a key's bytes are in the sealed file")
		}
	}
	if bytes.Contains(sealed, []byte("team-a")) || bytes.Contains(sealed, []byte(Format)) {
		t.Error("the sealed file shows its content")
	}
}

func TestSealRefuses(t *testing.T) {
	id := identity(t)
	for _, tc := range []struct {
		name   string
		mutate func(*Keys)
		want   string
	}{
		{"no keys", func(k *Keys) { k.Keys = nil }, "no keys"},
		{"a name the API server's config does not use", func(k *Keys) { k.Keys["primary"] = key(3) }, `"primary": name must be key-<n>`},
		{"a leading zero", func(k *Keys) { k.Keys["key-01"] = key(3) }, `"key-01"`},
		{"a short key", func(k *Keys) { k.Keys["key-1"] = key(1)[:16] }, "key-1: 16 bytes, want 32"},
		{"the write key absent", func(k *Keys) { k.Write = "key-9" }, `write key "key-9" is not among the keys`},
		{"no snapshot digest", func(k *Keys) { k.SnapshotSHA256 = "" }, "is not a hex sha256"},
		{"a digest too short", func(k *Keys) { k.SnapshotSHA256 = "abcd" }, "is not a hex sha256"},
		{"too many keys", func(k *Keys) {
			for i := range MaxKeys + 1 {
				k.Keys[fmt.Sprintf("key-%d", i+1)] = key(4)
			}
		}, "keys, at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := keys()
			tc.mutate(&k)
			var buf bytes.Buffer
			err := Seal(&buf, k, id.Recipient())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Seal: %v, want an error containing %q", err, tc.want)
			}
			if buf.Len() != 0 {
				t.Errorf("Seal wrote %d bytes before refusing", buf.Len())
			}
		})
	}
	if err := Seal(io.Discard, keys()); err == nil {
		t.Error("Seal without a recipient succeeded")
	}
}

// TestCheck is a restore's preflight: each way a key file can fail gets
// its own reason, the one the TenantCluster's condition shows.
func TestCheck(t *testing.T) {
	id, other := identity(t), identity(t)
	good := seal(t, keys(), id.Recipient())
	plain := func(mutate func(map[string]any)) []byte {
		b, _ := json.Marshal(file{Format: Format, Keys: keys()})
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		mutate(m)
		b, _ = json.Marshal(m)
		return sealRaw(t, b, id.Recipient())
	}
	for _, tc := range []struct {
		name     string
		sealed   []byte
		noFile   bool
		snapshot string
		samples  []Sample
		want     string
	}{
		{name: "whole", sealed: good, snapshot: digest("snapshot"), samples: []Sample{sample(t, "key-1", key(1)), sample(t, "key-2", key(2))}},
		{name: "a snapshot with no encrypted value yet", sealed: good, snapshot: digest("snapshot")},
		{name: "no key file", noFile: true, snapshot: digest("snapshot"), want: ReasonKeysMissing},
		{name: "sealed to another backup key", sealed: seal(t, keys(), other.Recipient()), snapshot: digest("snapshot"), want: ReasonBackupKeyWrong},
		{name: "keys of another snapshot", sealed: good, snapshot: digest("another snapshot"), want: ReasonKeysForAnotherSnapshot},
		{name: "the snapshot used a key the file lacks", sealed: good, snapshot: digest("snapshot"), samples: []Sample{sample(t, "key-1", key(1)), sample(t, "key-3", key(3))}, want: ReasonSnapshotKeyUnknown},
		{name: "another provider", sealed: good, snapshot: digest("snapshot"), samples: []Sample{func() Sample { s := sample(t, "key-1", key(1)); s.Provider = "aescbc:v1"; return s }()}, want: ReasonSnapshotKeyUnknown},
		{name: "a key of the right name and other bytes", sealed: good, snapshot: digest("snapshot"), samples: []Sample{sample(t, "key-2", key(2)), sample(t, "key-1", key(9))}, want: ReasonSnapshotKeyWrong},
		{name: "a value too short to hold a box", sealed: good, snapshot: digest("snapshot"), samples: []Sample{{Object: "/registry/secrets/a/b", Provider: Provider, Key: "key-1", Data: []byte("short")}}, want: ReasonSnapshotKeyWrong},
		{name: "not an age file", sealed: []byte("key-1: AAAA\n"), snapshot: digest("snapshot"), want: ReasonKeysDamaged},
		{name: "cut short", sealed: good[:len(good)-20], snapshot: digest("snapshot"), want: ReasonKeysDamaged},
		{name: "one byte flipped", sealed: func() []byte { b := bytes.Clone(good); b[len(b)-5] ^= 1; return b }(), snapshot: digest("snapshot"), want: ReasonKeysDamaged},
		{name: "larger than the bound", sealed: append(bytes.Clone(good), make([]byte, MaxFileSize)...), snapshot: digest("snapshot"), want: ReasonKeysDamaged},
		{name: "another format", sealed: plain(func(m map[string]any) { m["format"] = "kubefarm.io/backup-keys/v9" }), snapshot: digest("snapshot"), want: ReasonKeysDamaged},
		{name: "an unknown field", sealed: plain(func(m map[string]any) { m["plaintextSecrets"] = true }), snapshot: digest("snapshot"), want: ReasonKeysDamaged},
		{name: "sealed keys that fail validation", sealed: plain(func(m map[string]any) { m["write"] = "key-7" }), snapshot: digest("snapshot"), want: ReasonKeysDamaged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r io.Reader
			if !tc.noFile {
				r = bytes.NewReader(tc.sealed)
			}
			got, err := Check(r, tc.snapshot, tc.samples, id)
			if reason(err) != tc.want || (tc.want == "") != (err == nil) {
				t.Fatalf("Check: %v (reason %q), want reason %q", err, reason(err), tc.want)
			}
			if err == nil && !reflect.DeepEqual(got, keys()) {
				t.Errorf("Check gave %+v, want %+v", got, keys())
			}
			if err != nil {
				for _, k := range keys().Keys {
					if strings.Contains(err.Error(), string(k)) || strings.Contains(err.Error(), hex.EncodeToString(k)) {
						t.Errorf("the error quotes a key: %v", err)
					}
				}
			}
		})
	}
}

// FuzzOpen: a key file comes from storage the operator may not fully
// trust; whatever its bytes, Open returns valid keys or an error, and never
// panics or reads past its bound.
func FuzzOpen(f *testing.F) {
	id := identity(f)
	var buf bytes.Buffer
	if err := Seal(&buf, keys(), id.Recipient()); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte("age-encryption.org/v1\n-> X25519 AAAA\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := Open(bytes.NewReader(b), id)
		if err == nil {
			if verr := k.Validate(); verr != nil {
				t.Fatalf("Open accepted keys that fail validation: %v", verr)
			}
		}
	})
}

// TestParseRecipients: a backup key Secret's recipients as the operator
// may write them, and errors that never quote what was written.
func TestParseRecipients(t *testing.T) {
	a, _ := age.GenerateX25519Identity()
	b, _ := age.GenerateX25519Identity()
	ra, rb := a.Recipient().String(), b.Recipient().String()
	for _, tt := range []struct {
		name, data, want string
	}{
		{"one", ra + "\n", ""},
		{"without a final newline", ra, ""},
		{"two, comments, blank lines, CRLF", "# ops\r\n" + ra + "\r\n\r\n# escrow\n" + rb + "\n", ""},
		{"empty", "", "is empty"},
		{"comments only", "# none yet\n\n", "holds no age recipient"},
		{"an identity pasted", a.String() + "\n", "line 1 is not an age recipient"},
		{"a bad second recipient", "# ops\n" + ra + "\nage1notarecipient\n", "line 3 is not an age recipient"},
		{"an indented recipient", "  " + ra + "\n", "line 1 is not an age recipient"},
		{"too large", strings.Repeat("#"+strings.Repeat("x", 1022)+"\n", 65) + ra, "more than"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseRecipients([]byte(tt.data))
			if tt.want == "" {
				if err != nil {
					t.Errorf("ParseRecipients = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseRecipients = %v, want %q", err, tt.want)
			}
			// Never key material: not the pasted identity, not a line.
			if strings.Contains(err.Error(), "AGE-SECRET-KEY") || strings.Contains(err.Error(), "age1n") || strings.Contains(err.Error(), ra) {
				t.Errorf("the error %q quotes the value", err)
			}
		})
	}
}

// FuzzParseRecipients: the backup key Secret's recipients are the
// operator's input, read by the controller every pass and by each backup
// run. Whatever they hold, ParseRecipients returns, every recipient it
// accepts is spelled in the input, and its errors are one of its fixed
// sentences: never a piece of the input, which may be a pasted identity.
func FuzzParseRecipients(f *testing.F) {
	id := identity(f)
	f.Add([]byte(id.Recipient().String() + "\n"))
	f.Add([]byte("# a comment\n\n" + id.Recipient().String() + "\r\n" + id.Recipient().String()))
	f.Add([]byte(id.String() + "\n"))
	f.Add([]byte("age1\nssh-ed25519 AAAA\n"))
	f.Add([]byte{})
	sentence := regexp.MustCompile(`^(is empty|is \d+ bytes, more than \d+|line \d+ is not an age recipient \(age1\.\.\.\)|holds no age recipient \(age1\.\.\.\), only blank lines and # comments)$`)
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := ParseRecipients(b)
		if err != nil {
			if !sentence.MatchString(err.Error()) {
				t.Fatalf("error %q is not one of ParseRecipients' sentences", err)
			}
			return
		}
		if len(rs) == 0 {
			t.Fatal("no error and no recipient")
		}
		for _, r := range rs {
			x, ok := r.(*age.X25519Recipient)
			if ok && !bytes.Contains(b, []byte(x.String())) {
				t.Fatalf("recipient %s is not in the input", x)
			}
		}
	})
}

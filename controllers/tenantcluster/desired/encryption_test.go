package desired

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, EncryptionKeySize) }

func TestEncryptionConfiguration(t *testing.T) {
	cases := []struct {
		name    string
		keys    EncryptionKeys
		order   []string
		wantErr string
	}{
		{name: "one key", keys: EncryptionKeys{Keys: map[string][]byte{"key-1": key(1)}, Write: "key-1"}, order: []string{"key-1"}},
		{
			name:  "new key added, old still writes",
			keys:  EncryptionKeys{Keys: map[string][]byte{"key-1": key(1), "key-2": key(2)}, Write: "key-1", Stage: RotationAdded},
			order: []string{"key-1", "key-2"},
		},
		{
			name:  "new key writes, old reads",
			keys:  EncryptionKeys{Keys: map[string][]byte{"key-1": key(1), "key-2": key(2)}, Write: "key-2", Stage: RotationPromoted},
			order: []string{"key-2", "key-1"},
		},
		{
			// Numeric, not lexical: key-10 is newer than key-9.
			name:  "others newest first",
			keys:  EncryptionKeys{Keys: map[string][]byte{"key-9": key(9), "key-10": key(10), "key-2": key(2)}, Write: "key-2"},
			order: []string{"key-2", "key-10", "key-9"},
		},
		{name: "no keys", keys: EncryptionKeys{Write: "key-1"}, wantErr: "no encryption keys"},
		{name: "short key", keys: EncryptionKeys{Keys: map[string][]byte{"key-1": key(1)[:16]}, Write: "key-1"}, wantErr: "16 bytes, want 32"},
		{name: "bad name", keys: EncryptionKeys{Keys: map[string][]byte{"primary": key(1)}, Write: "primary"}, wantErr: "name must be key-<n>"},
		{name: "leading zero", keys: EncryptionKeys{Keys: map[string][]byte{"key-01": key(1)}, Write: "key-01"}, wantErr: "name must be key-<n>"},
		{name: "write key missing", keys: EncryptionKeys{Keys: map[string][]byte{"key-1": key(1)}, Write: "key-2"}, wantErr: `write key "key-2"`},
		{name: "unknown stage", keys: EncryptionKeys{Keys: map[string][]byte{"key-1": key(1), "key-2": key(2)}, Write: "key-1", Stage: "Halfway"}, wantErr: "unknown rotation stage"},
		{name: "rotating with one key", keys: EncryptionKeys{Keys: map[string][]byte{"key-1": key(1)}, Write: "key-1", Stage: RotationPromoted}, wantErr: "single key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := EncryptionConfiguration(tc.keys)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for range 20 { // map iteration order must not show
				again, err := EncryptionConfiguration(tc.keys)
				if err != nil || !bytes.Equal(again, out) {
					t.Fatalf("not byte-identical:\n%s\n%s", out, again)
				}
			}
			var cfg apiserverv1.EncryptionConfiguration
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatal(err)
			}
			if cfg.APIVersion != "apiserver.config.k8s.io/v1" || cfg.Kind != "EncryptionConfiguration" {
				t.Errorf("type %s/%s", cfg.APIVersion, cfg.Kind)
			}
			if len(cfg.Resources) != 1 || !slices.Equal(cfg.Resources[0].Resources, []string{"secrets"}) {
				t.Fatalf("resources %+v", cfg.Resources)
			}
			p := cfg.Resources[0].Providers
			if len(p) != 2 || p[0].Secretbox == nil || p[1].Identity == nil || p[0].AESCBC != nil || p[0].AESGCM != nil {
				t.Fatalf("providers must be secretbox then identity: %s", out)
			}
			var names []string
			for _, k := range p[0].Secretbox.Keys {
				names = append(names, k.Name)
				raw, err := base64.StdEncoding.DecodeString(k.Secret)
				if err != nil || !bytes.Equal(raw, tc.keys.Keys[k.Name]) {
					t.Errorf("%s: secret does not decode to the key", k.Name)
				}
			}
			if !slices.Equal(names, tc.order) {
				t.Errorf("key order %v, want %v", names, tc.order)
			}
		})
	}
}

func TestEncryptionKeySecretRoundTrip(t *testing.T) {
	c := resolveTC(t)
	s, err := NewEncryptionKeySecret(c, key(7), "req-0")
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "alpha-encryption" || s.Namespace != "tenants" || s.Labels[v1alpha1.LabelTenantCluster] != "alpha" {
		t.Errorf("meta %s/%s %v", s.Namespace, s.Name, s.Labels)
	}
	if len(s.OwnerReferences) != 0 {
		t.Error("the key Secret must not be owned: garbage collection would delete it under Retain")
	}
	k, err := ParseEncryptionKeys(s)
	if err != nil {
		t.Fatal(err)
	}
	if k.Write != "key-1" || k.Handled != "req-0" || k.Stage != RotationNone || !bytes.Equal(k.Keys["key-1"], key(7)) {
		t.Fatalf("parsed %+v", k)
	}
	if _, err := NewEncryptionKeySecret(c, key(7)[:31], ""); err == nil {
		t.Error("a 31-byte key was accepted")
	}

	// Through every stage and back.
	for _, st := range []RotationStage{RotationAdded, RotationPromoted, RotationRewritten, RotationNone} {
		k.Stage = st
		if st != RotationNone {
			k.Keys["key-2"] = key(8)
		} else {
			delete(k.Keys, "key-2")
		}
		k.WriteTo(s)
		got, err := ParseEncryptionKeys(s)
		if err != nil {
			t.Fatalf("%s: %v", st, err)
		}
		if got.Stage != st || len(got.Keys) != len(k.Keys) {
			t.Errorf("%s: parsed %+v", st, got)
		}
		if _, ok := s.Annotations[v1alpha1.AnnotationEncryptionRotation]; ok != (st != RotationNone) {
			t.Errorf("%s: rotation annotation present=%v", st, ok)
		}
	}

	cfg, err := EncryptionConfigSecret(c, k)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != c.SecretName(RoleEncryptionConfig) || len(cfg.Data[EncryptionConfigKey]) == 0 {
		t.Errorf("config Secret %s: %v", cfg.Name, cfg.Data)
	}
}

func TestDecideRotation(t *testing.T) {
	one := map[string][]byte{"key-1": key(1)}
	two := map[string][]byte{"key-1": key(1), "key-2": key(2)}
	cases := []struct {
		name      string
		keys      EncryptionKeys
		request   string
		rolledOut bool
		want      RotationStep
	}{
		{"no request", EncryptionKeys{Keys: one, Write: "key-1"}, "", true, StepNone},
		{"request already handled", EncryptionKeys{Keys: one, Write: "key-1", Handled: "a"}, "a", true, StepNone},
		{"new request", EncryptionKeys{Keys: one, Write: "key-1", Handled: "a"}, "b", true, StepAddKey},
		{"new request while rolling", EncryptionKeys{Keys: one, Write: "key-1", Handled: "a"}, "b", false, StepWaitRollout},
		{"added, rolling", EncryptionKeys{Keys: two, Write: "key-1", Stage: RotationAdded, Handled: "b"}, "b", false, StepWaitRollout},
		{"added, rolled out", EncryptionKeys{Keys: two, Write: "key-1", Stage: RotationAdded, Handled: "b"}, "b", true, StepPromote},
		{"promoted, rolling", EncryptionKeys{Keys: two, Write: "key-2", Stage: RotationPromoted, Handled: "b"}, "b", false, StepWaitRollout},
		{"promoted, rolled out", EncryptionKeys{Keys: two, Write: "key-2", Stage: RotationPromoted, Handled: "b"}, "b", true, StepRewrite},
		{"rewritten", EncryptionKeys{Keys: two, Write: "key-2", Stage: RotationRewritten, Handled: "b"}, "b", false, StepDropOld},
		// A request arriving mid-rotation neither restarts nor skips it.
		{"new request mid-rotation", EncryptionKeys{Keys: two, Write: "key-1", Stage: RotationAdded, Handled: "b"}, "c", true, StepPromote},
		// The request annotation removed mid-rotation: the rotation still finishes.
		{"request removed mid-rotation", EncryptionKeys{Keys: two, Write: "key-2", Stage: RotationPromoted, Handled: "b"}, "", true, StepRewrite},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := DecideRotation(tc.keys, tc.request, tc.rolledOut); got != tc.want {
				t.Errorf("DecideRotation = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestRotationWalk drives a whole rotation through DecideRotation and
// Advance, checking at every step that every key that encrypted something
// is still listed, that no key name is reused, and that it ends with the
// new key alone.
func TestRotationWalk(t *testing.T) {
	k := EncryptionKeys{Keys: map[string][]byte{"key-3": key(3), "key-1": key(1)}, Write: "key-3", Handled: "old"}
	used := map[string]bool{"key-3": true}
	steps, k := walkRotation(t, k, "rotate-1", true, func(step RotationStep, k, next EncryptionKeys) {
		for name := range used {
			if _, ok := next.Keys[name]; !ok && step != StepDropOld {
				t.Errorf("after %s: key %s that encrypted data is gone", step, name)
			}
		}
		if step == StepAddKey {
			if _, ok := k.Keys[next.Newest()]; ok {
				t.Errorf("AddKey reused the name %s", next.Newest())
			}
		}
		used[next.Write] = true
	})
	want := []RotationStep{StepAddKey, StepWaitRollout, StepPromote, StepWaitRollout, StepRewrite, StepDropOld, StepNone}
	if !slices.Equal(steps, want) {
		t.Errorf("steps %v, want %v", steps, want)
	}
	if k.Write != "key-4" || len(k.Keys) != 1 || k.Stage != RotationNone || k.Handled != "rotate-1" {
		t.Errorf("end state %+v", k)
	}
	if _, err := k.Advance(StepPromote, nil, ""); err == nil {
		t.Error("Promote accepted outside a rotation")
	}
	if _, err := k.Advance(StepAddKey, key(1)[:8], "x"); err == nil {
		t.Error("AddKey accepted a short key")
	}
}

// TestRestoredRotationWalk: keys restored from a snapshot (two, as a
// snapshot taken mid-rotation holds, the write key not the newest) are
// rotated out without a request, and until the Secrets are rewritten every
// one of them stays listed: which of them encrypted what is not known.
func TestRestoredRotationWalk(t *testing.T) {
	restored := map[string][]byte{"key-1": key(1), "key-2": key(2)}
	k := EncryptionKeys{Keys: restored, Write: "key-1", Stage: RotationRestored, Handled: "h"}
	if err := k.Validate(); err != nil {
		t.Fatalf("restored keys refused: %v", err)
	}
	if single := (EncryptionKeys{Keys: map[string][]byte{"key-7": key(7)}, Write: "key-7", Stage: RotationRestored}); single.Validate() != nil {
		t.Errorf("one restored key refused: %v", single.Validate())
	}
	// The first API server has not started yet: not rolled out.
	steps, k := walkRotation(t, k, "h", false, func(step RotationStep, _, next EncryptionKeys) {
		if step != StepDropOld {
			for name := range restored {
				if _, ok := next.Keys[name]; !ok {
					t.Errorf("after %s: restored key %s is gone before the rewrite", step, name)
				}
			}
		}
	})
	want := []RotationStep{StepWaitRollout, StepAddKey, StepWaitRollout, StepPromote, StepWaitRollout, StepRewrite, StepDropOld, StepNone}
	if !slices.Equal(steps, want) {
		t.Errorf("steps %v, want %v", steps, want)
	}
	if k.Write != "key-3" || len(k.Keys) != 1 || k.Stage != RotationNone {
		t.Errorf("end state: write %s of %d keys at stage %q; want key-3 alone", k.Write, len(k.Keys), k.Stage)
	}
}

// walkRotation drives k through DecideRotation and Advance until no step
// is left (at most 10), calling check after each step that changes the
// keys, and returns the steps and the end state. A change of keys rolls
// the API servers, which the next WaitRollout sees finished.
func walkRotation(t *testing.T, k EncryptionKeys, request string, rolledOut bool, check func(step RotationStep, k, next EncryptionKeys)) ([]RotationStep, EncryptionKeys) {
	t.Helper()
	var steps []RotationStep
	for i := 0; i < 10; i++ {
		step := DecideRotation(k, request, rolledOut)
		steps = append(steps, step)
		if step == StepNone {
			break
		}
		if step == StepWaitRollout {
			rolledOut = true
			continue
		}
		next, err := k.Advance(step, key(byte(40+i)), request)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		check(step, k, next)
		rolledOut = !step.ChangesConfig()
		k = next
	}
	return steps, k
}

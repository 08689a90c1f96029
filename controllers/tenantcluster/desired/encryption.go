package desired

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
)

// Encryption at rest (docs/encryption.md). The tenant's API servers encrypt
// Secrets in etcd with the secretbox provider (XSalsa20-Poly1305; the
// upstream documentation rates it above aescbc, and unlike aesgcm it needs
// no rotation every 200,000 writes). The keys live in two Secrets:
//
//   - the key Secret (EncryptionKeySecretName), which the manager creates
//     once with a random key and never regenerates: it is the only copy of
//     the keys, so it is not owned by the TenantCluster and follows
//     spec.volumeReclaimPolicy like the etcd volumes it decrypts. Its data
//     holds the keys (key-<n>, 32 bytes each), its annotations the write
//     key and the state of a rotation, so a crash loses nothing;
//   - the configuration Secret (SecretName(RoleEncryptionConfig)), the
//     EncryptionConfiguration rendered from the key Secret, mounted into
//     kube-apiserver. It is derived, owned by the TenantCluster and
//     rendered again every pass. It holds key material, so it is a Secret,
//     never part of the control plane ConfigMap.

// RoleEncryptionConfig is not a certificate: it names the Secret with the
// rendered EncryptionConfiguration, mounted like the PKI Secrets (at
// /etc/kubernetes/pki/encryption-config) and hashed into the API server
// pods' checksum, so a change of keys rolls them.
const RoleEncryptionConfig PKIRole = "encryption-config"

// EncryptionConfigKey is the key of the rendered configuration in its Secret.
const EncryptionConfigKey = "encryption-configuration.json"

// EncryptionKeySize is the size of a secretbox key.
const EncryptionKeySize = 32

// EncryptionKeyPrefix starts the name of every key: key-1, key-2, ... The
// name is written in clear into every value it encrypts
// (k8s:enc:secretbox:v1:<name>:), so names are never reused.
const EncryptionKeyPrefix = "key-"

// The key Secret's annotations and the TenantCluster's rotation request are
// api/v1alpha1's AnnotationEncryption* and AnnotationRotateEncryptionKey.

// EncryptionKeySecretName names the Secret with the tenant's encryption keys.
func (c *Cluster) EncryptionKeySecretName() string { return EncryptionKeySecretName(c.Name) }

// EncryptionKeySecretName names the key Secret of the TenantCluster cluster
// (for the finalizer, which has no resolved Cluster).
func EncryptionKeySecretName(cluster string) string { return cluster + "-encryption" }

// RotationStage is where a key rotation is. Each stage names what has been
// done; RotationDecision says what comes next.
type RotationStage string

const (
	// RotationNone: one key, reading and writing (or older keys still
	// listed after a crash between steps; dropped at the next rotation).
	RotationNone RotationStage = ""
	// RotationAdded: the new key is listed after the write key, so API
	// servers can read what it will encrypt before any server writes with it.
	RotationAdded RotationStage = "KeyAdded"
	// RotationPromoted: the new key is the write key; the old one is still
	// listed to read what it encrypted.
	RotationPromoted RotationStage = "KeyPromoted"
	// RotationRewritten: every Secret of the tenant was rewritten with the
	// new key; the old one can go.
	RotationRewritten RotationStage = "SecretsRewritten"
	// RotationRestored: the keys came from a snapshot's key file
	// (spec.etcd.restoreFrom). They are the old tenant's, and which of them
	// encrypted what is not known, so a rotation starts as soon as the API
	// servers run them: a fresh key is added beside all of them, written
	// with, every Secret rewritten, and only then are they dropped.
	RotationRestored RotationStage = "Restored"
)

// EncryptionKeys is the content of the key Secret.
type EncryptionKeys struct {
	// Keys by name (key-<n>), 32 bytes each.
	Keys map[string][]byte
	// Write is the key new writes use.
	Write string
	// Stage of the rotation in progress.
	Stage RotationStage
	// Handled is the last rotation request started.
	Handled string
}

// keyNumber is n of key-n, or -1 for any other name.
func keyNumber(name string) int {
	s, ok := strings.CutPrefix(name, EncryptionKeyPrefix)
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || strconv.Itoa(n) != s {
		return -1
	}
	return n
}

// Validate checks what the API server would refuse or what would lose data.
func (k EncryptionKeys) Validate() error {
	if len(k.Keys) == 0 {
		return fmt.Errorf("no encryption keys")
	}
	for name, key := range k.Keys {
		if keyNumber(name) < 0 {
			return fmt.Errorf("encryption key %q: name must be %s<n>", name, EncryptionKeyPrefix)
		}
		if len(key) != EncryptionKeySize {
			return fmt.Errorf("encryption key %s: %d bytes, want %d", name, len(key), EncryptionKeySize)
		}
	}
	if _, ok := k.Keys[k.Write]; !ok {
		return fmt.Errorf("write key %q is not among the keys", k.Write)
	}
	switch k.Stage {
	case RotationNone, RotationAdded, RotationPromoted, RotationRewritten, RotationRestored:
	default:
		return fmt.Errorf("unknown rotation stage %q", k.Stage)
	}
	if k.Stage != RotationNone && k.Stage != RotationRestored && len(k.Keys) < 2 {
		return fmt.Errorf("rotation stage %s with a single key", k.Stage)
	}
	return nil
}

// Order is the order of the keys in the configuration: the write key first
// (kube-apiserver encrypts with the first), then the others newest first.
func (k EncryptionKeys) Order() []string {
	others := slices.DeleteFunc(slices.Collect(maps.Keys(k.Keys)), func(n string) bool { return n == k.Write })
	slices.SortFunc(others, func(a, b string) int { return keyNumber(b) - keyNumber(a) })
	return append([]string{k.Write}, others...)
}

// Newest is the key with the highest number.
func (k EncryptionKeys) Newest() string {
	best := ""
	for n := range k.Keys {
		if best == "" || keyNumber(n) > keyNumber(best) {
			best = n
		}
	}
	return best
}

// NextKeyName is the name of a key added now: never one used before, as
// long as the highest-numbered key is kept (it always is: it is the write
// key or the one being rotated in).
func (k EncryptionKeys) NextKeyName() string {
	return EncryptionKeyPrefix + strconv.Itoa(keyNumber(k.Newest())+1)
}

// EncryptionConfiguration renders the apiserver.config.k8s.io/v1
// configuration: Secrets through secretbox with the keys in Order, then
// identity, so Secrets written before encryption was on (a tenant created
// by an older kubefarm) still read; they are encrypted at their next write
// or at the next rotation, which rewrites every Secret. The same keys give
// the same bytes.
func EncryptionConfiguration(k EncryptionKeys) ([]byte, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	keys := make([]apiserverv1.Key, 0, len(k.Keys))
	for _, name := range k.Order() {
		keys = append(keys, apiserverv1.Key{Name: name, Secret: base64.StdEncoding.EncodeToString(k.Keys[name])})
	}
	cfg := apiserverv1.EncryptionConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: apiserverv1.SchemeGroupVersion.String(), Kind: "EncryptionConfiguration"},
		Resources: []apiserverv1.ResourceConfiguration{{
			Resources: []string{"secrets"},
			Providers: []apiserverv1.ProviderConfiguration{
				{Secretbox: &apiserverv1.SecretboxConfiguration{Keys: keys}},
				{Identity: &apiserverv1.IdentityConfiguration{}},
			},
		}},
	}
	return json.Marshal(cfg)
}

// EncryptionConfigSecret is the Secret kube-apiserver mounts.
func EncryptionConfigSecret(c *Cluster, k EncryptionKeys) (*corev1.Secret, error) {
	cfg, err := EncryptionConfiguration(k)
	if err != nil {
		return nil, fmt.Errorf("encryption configuration of %s: %w", c.EncryptionKeySecretName(), err)
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: c.SecretName(RoleEncryptionConfig), Namespace: c.Namespace, Labels: c.labels(ComponentAPIServer)},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{EncryptionConfigKey: cfg},
	}, nil
}

// NewEncryptionKeySecret is the key Secret of a new tenant, with key as
// key-1 (the caller draws it from crypto/rand). handled is the
// TenantCluster's current rotation request, so creating the Secret does not
// start a rotation at once. It is labelled like the tenant's other objects
// and deliberately has no owner reference (see the package comment above).
func NewEncryptionKeySecret(c *Cluster, key []byte, handled string) (*corev1.Secret, error) {
	k := EncryptionKeys{Keys: map[string][]byte{EncryptionKeyPrefix + "1": key}, Write: EncryptionKeyPrefix + "1", Handled: handled}
	if err := k.Validate(); err != nil {
		return nil, err
	}
	s := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: c.EncryptionKeySecretName(), Namespace: c.Namespace, Labels: c.labels(ComponentAPIServer)},
		Type:       corev1.SecretTypeOpaque,
	}
	k.WriteTo(s)
	return s, nil
}

// NewRestoredEncryptionKeySecret is the key Secret of a tenant restored
// from snapshot: the keys of its key file, at stage RotationRestored so
// that a fresh key replaces them once the API servers run. handled is as
// for NewEncryptionKeySecret.
func NewRestoredEncryptionKeySecret(c *Cluster, keys map[string][]byte, write, snapshot, handled string) (*corev1.Secret, error) {
	k := EncryptionKeys{Keys: maps.Clone(keys), Write: write, Stage: RotationRestored, Handled: handled}
	if err := k.Validate(); err != nil {
		return nil, fmt.Errorf("the keys of %s: %w", snapshot, err)
	}
	s := &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: c.EncryptionKeySecretName(), Namespace: c.Namespace, Labels: c.labels(ComponentAPIServer),
			Annotations: map[string]string{v1alpha1.AnnotationEncryptionRestoredFrom: snapshot}},
		Type: corev1.SecretTypeOpaque,
	}
	k.WriteTo(s)
	return s, nil
}

// ParseEncryptionKeys reads the key Secret.
func ParseEncryptionKeys(s *corev1.Secret) (EncryptionKeys, error) {
	k := EncryptionKeys{
		Keys:    map[string][]byte{},
		Write:   s.Annotations[v1alpha1.AnnotationEncryptionWriteKey],
		Stage:   RotationStage(s.Annotations[v1alpha1.AnnotationEncryptionRotation]),
		Handled: s.Annotations[v1alpha1.AnnotationEncryptionHandled],
	}
	for name, v := range s.Data {
		k.Keys[name] = v
	}
	if err := k.Validate(); err != nil {
		return EncryptionKeys{}, fmt.Errorf("secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return k, nil
}

// WriteTo stores the keys into the key Secret, replacing its data and the
// annotations it owns.
func (k EncryptionKeys) WriteTo(s *corev1.Secret) {
	s.Data = map[string][]byte{}
	for name, v := range k.Keys {
		s.Data[name] = v
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[v1alpha1.AnnotationEncryptionWriteKey] = k.Write
	s.Annotations[v1alpha1.AnnotationEncryptionHandled] = k.Handled
	if k.Stage == RotationNone {
		delete(s.Annotations, v1alpha1.AnnotationEncryptionRotation)
	} else {
		s.Annotations[v1alpha1.AnnotationEncryptionRotation] = string(k.Stage)
	}
}

// RotationStep is what the controller does next for a rotation.
type RotationStep string

const (
	// StepNone: no rotation requested or in progress.
	StepNone RotationStep = "None"
	// StepWaitRollout: the API servers still roll onto the last change;
	// nothing else may happen before every one of them runs it.
	StepWaitRollout RotationStep = "WaitRollout"
	// StepAddKey: add a new key after the write key (a rollout follows).
	StepAddKey RotationStep = "AddKey"
	// StepPromote: make the new key the write key (a rollout follows).
	StepPromote RotationStep = "Promote"
	// StepRewrite: rewrite every Secret of the tenant with the new key.
	StepRewrite RotationStep = "Rewrite"
	// StepDropOld: remove every key but the write key.
	StepDropOld RotationStep = "DropOld"
)

// DecideRotation is the next step of a rotation. request is the
// TenantCluster's v1alpha1.AnnotationRotateEncryptionKey (empty: none); rolledOut
// says every API server pod runs the configuration rendered from k (the
// Deployment was applied with it and its rollout finished).
//
// Why each step waits: an API server can only read a value encrypted with
// a key its configuration lists. So the new key is listed by every server
// (AddKey, rollout) before any server writes with it (Promote), and every
// server writes with it (rollout) before the Secrets are rewritten, or a
// Secret written meanwhile by a server still on the old write key would
// keep the old key after the rewrite. Dropping the old key needs no wait:
// nothing is encrypted with it any more.
func DecideRotation(k EncryptionKeys, request string, rolledOut bool) RotationStep {
	switch k.Stage {
	case RotationAdded:
		if !rolledOut {
			return StepWaitRollout
		}
		return StepPromote
	case RotationPromoted:
		if !rolledOut {
			return StepWaitRollout
		}
		return StepRewrite
	case RotationRewritten:
		return StepDropOld
	case RotationRestored:
		if !rolledOut {
			return StepWaitRollout
		}
		return StepAddKey
	}
	if request == "" || request == k.Handled {
		return StepNone
	}
	if !rolledOut {
		// Not while the API servers still roll (an upgrade, a new
		// certificate, or the end of the last rotation): the new key must
		// reach every server, and a server the rollout has not replaced
		// yet would never learn it.
		return StepWaitRollout
	}
	return StepAddKey
}

// Advance applies a step to the keys and returns the new state; newKey is
// the random key StepAddKey adds (ignored by the other steps). Steps that
// change nothing (None, WaitRollout) return k unchanged.
func (k EncryptionKeys) Advance(step RotationStep, newKey []byte, request string) (EncryptionKeys, error) {
	next := EncryptionKeys{Keys: maps.Clone(k.Keys), Write: k.Write, Stage: k.Stage, Handled: k.Handled}
	switch step {
	case StepNone, StepWaitRollout:
		return k, nil
	case StepAddKey:
		if k.Stage != RotationNone && k.Stage != RotationRestored {
			return k, fmt.Errorf("cannot add a key at stage %s", k.Stage)
		}
		if len(newKey) != EncryptionKeySize {
			return k, fmt.Errorf("new key: %d bytes, want %d", len(newKey), EncryptionKeySize)
		}
		// Keys left from an interrupted earlier rotation go now; only the
		// write key and the new one remain. Restored keys all stay: any
		// of them may have encrypted a Secret of the snapshot.
		next.Keys = map[string][]byte{k.Write: k.Keys[k.Write]}
		if k.Stage == RotationRestored {
			next.Keys = maps.Clone(k.Keys)
		}
		next.Keys[k.NextKeyName()] = newKey
		next.Stage, next.Handled = RotationAdded, request
	case StepPromote:
		if k.Stage != RotationAdded {
			return k, fmt.Errorf("cannot promote at stage %s", k.Stage)
		}
		next.Write, next.Stage = k.Newest(), RotationPromoted
	case StepRewrite:
		if k.Stage != RotationPromoted {
			return k, fmt.Errorf("cannot mark rewritten at stage %s", k.Stage)
		}
		next.Stage = RotationRewritten
	case StepDropOld:
		if k.Stage != RotationRewritten {
			return k, fmt.Errorf("cannot drop old keys at stage %s", k.Stage)
		}
		next.Keys = map[string][]byte{k.Write: k.Keys[k.Write]}
		next.Stage = RotationNone
	default:
		return k, fmt.Errorf("unknown rotation step %q", step)
	}
	return next, next.Validate()
}

// ChangesConfig says whether a step changes the rendered configuration,
// and so rolls the API servers.
func (s RotationStep) ChangesConfig() bool {
	return s == StepAddKey || s == StepPromote || s == StepDropOld
}

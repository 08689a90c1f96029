package tenantcluster_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
)

// encryptionKeys reads and parses a tenant's key Secret.
func encryptionKeys(ctx context.Context, key types.NamespacedName) (desired.EncryptionKeys, *corev1.Secret, error) {
	s := &corev1.Secret{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: desired.EncryptionKeySecretName(key.Name)}, s); err != nil {
		return desired.EncryptionKeys{}, nil, err
	}
	k, err := desired.ParseEncryptionKeys(s)
	return k, s, err
}

// renderedKeys is the secretbox key list of the configuration Secret the
// API servers mount, by name, in order, with their base64 secrets.
func renderedKeys(ctx context.Context, key types.NamespacedName) ([]apiserverv1.Key, error) {
	s := &corev1.Secret{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: key.Name + "-encryption-config"}, s); err != nil {
		return nil, err
	}
	var cfg apiserverv1.EncryptionConfiguration
	if err := json.Unmarshal(s.Data[desired.EncryptionConfigKey], &cfg); err != nil {
		return nil, err
	}
	if len(cfg.Resources) != 1 || len(cfg.Resources[0].Providers) != 2 || cfg.Resources[0].Providers[0].Secretbox == nil {
		return nil, fmt.Errorf("unexpected configuration %s", s.Data[desired.EncryptionConfigKey])
	}
	return cfg.Resources[0].Providers[0].Secretbox.Keys, nil
}

func keyNames(keys []apiserverv1.Key) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k.Name)
	}
	return out
}

// checkEncryptionSetup: a ready tenant has its key Secret (not owned: it
// must survive garbage collection under Retain), a configuration Secret
// rendered from it, and API servers that mount it.
func checkEncryptionSetup(ctx context.Context, t *testing.T, key types.NamespacedName) {
	keys, s, err := encryptionKeys(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if keys.Write != "key-1" || len(keys.Keys) != 1 || keys.Stage != desired.RotationNone {
		t.Errorf("new tenant's keys: %v write %s stage %q", keys.Order(), keys.Write, keys.Stage)
	}
	if len(s.OwnerReferences) != 0 {
		t.Errorf("key Secret has owners %v: garbage collection would delete it under Retain", s.OwnerReferences)
	}
	rendered, err := renderedKeys(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keyNames(rendered), []string{"key-1"}) || rendered[0].Secret != base64.StdEncoding.EncodeToString(keys.Keys["key-1"]) {
		t.Errorf("rendered keys %v do not match the key Secret", keyNames(rendered))
	}
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: key.Name + "-control-plane"}, cm); err != nil {
		t.Fatal(err)
	}
	for k, v := range cm.Data {
		if strings.Contains(v, rendered[0].Secret) || strings.Contains(v, "secretbox") {
			t.Errorf("ConfigMap key %s carries encryption configuration", k)
		}
	}
	dep := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: key.Name + "-apiserver"}, dep); err != nil {
		t.Fatal(err)
	}
	pod := dep.Spec.Template.Spec
	if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool {
		return v.Secret != nil && v.Secret.SecretName == key.Name+"-encryption-config"
	}) {
		t.Error("the API server does not mount the encryption configuration Secret")
	}
	if !slices.ContainsFunc(pod.Containers[0].Args, func(a string) bool {
		return strings.HasPrefix(a, "--encryption-provider-config=/etc/kubernetes/")
	}) {
		t.Errorf("no --encryption-provider-config in %v", pod.Containers[0].Args)
	}
}

// checkEncryptionRotation requests a key rotation through the annotation
// and follows it to the end with the simulated rollouts of markReady: the
// controller adds key-2, promotes it, rewrites the tenant's Secrets (the
// fake tenant is this API server, with a canary Secret), drops key-1, and says so in Events and the condition, which
// never carry key material.
func checkEncryptionRotation(ctx context.Context, t *testing.T, key types.NamespacedName, markReady func(context.Context) error) {
	before, _, err := encryptionKeys(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	canary := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "rotation-canary"},
		Data: map[string][]byte{"v": []byte("x")}}
	if err := env.Client.Create(ctx, canary); err != nil {
		t.Fatal(err)
	}
	dep := &appsv1.Deployment{}
	depKey := types.NamespacedName{Namespace: key.Namespace, Name: key.Name + "-apiserver"}
	if err := env.Client.Get(ctx, depKey, dep); err != nil {
		t.Fatal(err)
	}
	checksumBefore := dep.Spec.Template.Annotations[v1alpha1.AnnotationChecksum]

	cur, err := getTC(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cur.DeepCopy())
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	cur.Annotations[v1alpha1.AnnotationRotateEncryptionKey] = "2026-11-24"
	if err := env.Client.Patch(ctx, cur, patch); err != nil {
		t.Fatal(err)
	}
	// Each step that changes keys waits for the API servers' rollout,
	// which markReady plays; the stages seen on the way are recorded.
	stages := map[desired.RotationStage]bool{}
	poll(ctx, t, "key rotation finished", 3*time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := markReady(ctx); err != nil {
			return false, "", err
		}
		keys, _, err := encryptionKeys(ctx, key)
		if err != nil {
			return false, "", err
		}
		stages[keys.Stage] = true
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionEncryptionKeyRotated)
		// The configuration the API servers mount follows the key Secret
		// on the pass after the old key is dropped.
		rendered, err := renderedKeys(ctx, key)
		if err != nil {
			return false, "", err
		}
		done := keys.Write == "key-2" && len(keys.Keys) == 1 && keys.Stage == desired.RotationNone &&
			c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "key-2") &&
			slices.Equal(keyNames(rendered), []string{"key-2"})
		return done, fmt.Sprintf("keys %v write %s stage %q, rendered %v; %s", keys.Order(), keys.Write, keys.Stage,
			keyNames(rendered), conditionsString(got)), nil
	})
	after, _, err := encryptionKeys(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if after.Handled != "2026-11-24" {
		t.Errorf("handled request %q", after.Handled)
	}
	rendered, err := renderedKeys(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keyNames(rendered), []string{"key-2"}) {
		t.Errorf("rendered keys after the rotation: %v", keyNames(rendered))
	}
	if err := env.Client.Get(ctx, depKey, dep); err != nil {
		t.Fatal(err)
	}
	if dep.Spec.Template.Annotations[v1alpha1.AnnotationChecksum] == checksumBefore {
		t.Error("the API servers did not roll onto the new key")
	}
	// Every step is an Event; no Event and no condition carries a key.
	secrets := []string{base64.StdEncoding.EncodeToString(before.Keys["key-1"]), base64.StdEncoding.EncodeToString(after.Keys["key-2"]),
		string(before.Keys["key-1"]), string(after.Keys["key-2"])}
	tc, err := getTC(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "an Event per rotation step", time.Minute, func(ctx context.Context) (bool, string, error) {
		events := &eventsv1.EventList{}
		if err := env.Client.List(ctx, events, client.InNamespace(key.Namespace)); err != nil {
			return false, "", err
		}
		actions := map[string]bool{}
		for _, e := range events.Items {
			if e.Regarding.UID != tc.UID {
				continue
			}
			for _, s := range secrets {
				if strings.Contains(e.Note, s) {
					t.Fatalf("Event %s carries key material", e.Reason)
				}
			}
			if e.Reason == "EncryptionKeyRotation" {
				actions[e.Action] = true
			}
			// envtest's API server does not encrypt, so a rewrite
			// changes nothing there (the etcd test in encryptiontest
			// shows it re-encrypts); the count shows the Secrets,
			// the canary among them, went through it.
			var n int
			if e.Reason == "EncryptionSecretsRewritten" {
				if _, err := fmt.Sscanf(e.Note, "rewrote %d Secrets", &n); err != nil || n < 1 {
					t.Errorf("rewrite Event %q: want at least the canary", e.Note)
				}
				actions["rewrote"] = true
			}
		}
		var missing []string
		for _, a := range []string{string(desired.StepAddKey), string(desired.StepPromote), string(desired.StepRewrite), string(desired.StepDropOld), "rewrote"} {
			if !actions[a] {
				missing = append(missing, a)
			}
		}
		return len(missing) == 0, fmt.Sprintf("missing %v", missing), nil
	})
	for _, c := range tc.Status.Conditions {
		for _, s := range secrets {
			if strings.Contains(c.Message, s) {
				t.Errorf("condition %s carries key material", c.Type)
			}
		}
	}
	if !stages[desired.RotationAdded] && !stages[desired.RotationPromoted] {
		t.Logf("stages observed on the way: %v (the steps are fast; the Events above prove each was taken)", stages)
	}
}

// TestEncryptionKeyRetained: with volumeReclaimPolicy Retain the key Secret
// outlives its TenantCluster (the retained etcd data is unreadable without
// it), and a TenantCluster recreated under the same name encrypts with the
// same key instead of generating one.
func TestEncryptionKeyRetained(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns := newNamespace(t)
	tc := exampleTenantCluster(t, ns)
	tc.Spec.VolumeReclaimPolicy = v1alpha1.VolumeReclaimRetain
	if err := env.Client.Create(ctx, tc); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(tc)
	var first []apiserverv1.Key
	poll(ctx, t, "encryption configuration rendered", 3*time.Minute, func(ctx context.Context) (bool, string, error) {
		var err error
		first, err = renderedKeys(ctx, key)
		return err == nil, fmt.Sprint(err), client.IgnoreNotFound(err)
	})
	k1, s1, err := encryptionKeys(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, tc); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "TenantCluster gone", time.Minute, func(ctx context.Context) (bool, string, error) {
		_, err := getTC(ctx, key)
		return apierrors.IsNotFound(err), fmt.Sprint(err), client.IgnoreNotFound(err)
	})
	k2, s2, err := encryptionKeys(ctx, key)
	if err != nil {
		t.Fatalf("key Secret after deletion with Retain: %v", err)
	}
	if s2.UID != s1.UID || string(k2.Keys["key-1"]) != string(k1.Keys["key-1"]) {
		t.Fatal("the key Secret was replaced")
	}

	again := exampleTenantCluster(t, ns)
	again.Spec.VolumeReclaimPolicy = v1alpha1.VolumeReclaimRetain
	if err := env.Client.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "configuration rendered again from the retained key", 3*time.Minute, func(ctx context.Context) (bool, string, error) {
		rendered, err := renderedKeys(ctx, key)
		if err != nil {
			return false, err.Error(), client.IgnoreNotFound(err)
		}
		cfg := &corev1.Secret{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: key.Name + "-encryption-config"}, cfg); err != nil {
			return false, "", client.IgnoreNotFound(err)
		}
		// The configuration Secret of the first TenantCluster was
		// garbage-collected (owned); wait for the new owner's.
		owned := slices.ContainsFunc(cfg.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == again.UID })
		return owned && slices.Equal(keyNames(rendered), keyNames(first)) && rendered[0].Secret == first[0].Secret,
			fmt.Sprintf("owned by the new TenantCluster %v, keys %v", owned, keyNames(rendered)), nil
	})
	if err := env.Client.Delete(ctx, again); err != nil {
		t.Fatal(err)
	}
}

package tenantcluster_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/testing/examples"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// TestAuditOnARealAPIServer starts a real kube-apiserver with the audit
// flags and default policy a tenant gets (mode File; the file paths moved
// from the pod's mounts to a temporary directory) and checks what it
// writes: a Secret's creation at Metadata without its value, a
// Deployment's creation at Request with its body, no health checks, and
// each request once (the RequestReceived stage omitted).
func TestAuditOnARealAPIServer(t *testing.T) {
	tc, err := examples.TenantCluster()
	if err != nil {
		t.Fatal(err)
	}
	tc.Namespace = "audit"
	c, err := desired.Resolve(tc, desired.Options{Images: desired.Images{Registry: "r", EtcdTag: "t", KonnectivityTag: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Audit.Mode != v1alpha1.AuditFile {
		t.Fatalf("the example's audit mode is %q, want the default File", c.Audit.Mode)
	}
	all, err := desired.APIServerFlags(c)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	policyFile, logFile := filepath.Join(dir, desired.ConfigKeyAuditPolicy), filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policyFile, c.Audit.Policy, 0o600); err != nil {
		t.Fatal(err)
	}
	flags := map[string]string{}
	for _, f := range all {
		k, v, _ := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		if !strings.HasPrefix(k, "audit-") {
			continue
		}
		switch k {
		case "audit-policy-file":
			v = policyFile
		case "audit-log-path":
			if v != desired.AuditLogFile {
				t.Fatalf("--audit-log-path=%s, want %s", v, desired.AuditLogFile)
			}
			v = logFile
		}
		flags[k] = v
	}
	if len(flags) < 5 {
		t.Fatalf("audit flags %v: want the policy, path, size, backups and format", flags)
	}
	aenv := testenv.StartT(t, testenv.Options{APIServerFlags: flags})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const value = "audit-probe-value-7f3e"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "probe"}, StringData: map[string]string{"v": value}}
	if err := aenv.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "probe"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "probe"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe"}}},
			},
		},
	}
	if err := aenv.Client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}

	// The log backend writes each event before the request is answered
	// (blocking mode), so both are in the file once the calls returned;
	// the poll only covers the file system.
	var events []auditv1.Event
	var raw []byte
	find := func(verb, resource, name string) *auditv1.Event {
		for i := range events {
			e := &events[i]
			if e.Verb == verb && e.ObjectRef != nil && e.ObjectRef.Resource == resource && e.ObjectRef.Name == name {
				return e
			}
		}
		return nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		raw, err = os.ReadFile(logFile)
		if err != nil {
			return false, nil
		}
		events = events[:0]
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var e auditv1.Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				return false, err
			}
			events = append(events, e)
		}
		return find("create", "secrets", "probe") != nil && find("create", "deployments", "probe") != nil, sc.Err()
	}); err != nil {
		t.Fatalf("the audit log %s never recorded both creations: %v (%d events)", logFile, err, len(events))
	}

	if e := find("create", "secrets", "probe"); e.Level != auditv1.LevelMetadata || e.RequestObject != nil || e.ResponseObject != nil {
		t.Errorf("the Secret's creation: level %s, request body %v, response body %v; want Metadata and no bodies",
			e.Level, e.RequestObject != nil, e.ResponseObject != nil)
	}
	for _, leak := range []string{value, base64.StdEncoding.EncodeToString([]byte(value))} {
		if bytes.Contains(raw, []byte(leak)) {
			t.Errorf("the audit log holds the Secret's value (%q)", leak)
		}
	}
	if e := find("create", "deployments", "probe"); e.Level != auditv1.LevelRequest || e.RequestObject == nil || e.ResponseObject != nil {
		t.Errorf("the Deployment's creation: level %s, request body %v, response body %v; want Request with the request body only",
			e.Level, e.RequestObject != nil, e.ResponseObject != nil)
	}
	perRequest := map[string]int{}
	for _, e := range events {
		if e.Stage == auditv1.StageRequestReceived {
			t.Errorf("a RequestReceived event for %s %s", e.Verb, e.RequestURI)
		}
		for _, p := range []string{"/healthz", "/livez", "/readyz"} {
			if strings.HasPrefix(e.RequestURI, p) {
				t.Errorf("a health check was audited: %s %s", e.Verb, e.RequestURI)
			}
		}
		perRequest[string(e.AuditID)+"/"+string(e.Stage)]++
	}
	for id, n := range perRequest {
		if n > 1 {
			t.Errorf("request %s recorded %d times", id, n)
		}
	}
	t.Logf("%d audit events, %d bytes", len(events), len(raw))
}

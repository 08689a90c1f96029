package desired

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditpolicy "k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func auditSpec(a v1alpha1.AuditSpec) func(*v1alpha1.TenantCluster) {
	return func(tc *v1alpha1.TenantCluster) { tc.Spec.APIServer.Audit = a }
}

func rawPolicy(s string) *runtime.RawExtension { return &runtime.RawExtension{Raw: []byte(s)} }

// apiServerContainer returns the kube-apiserver container and the pod's
// volumes of the tenant's API server Deployment.
func apiServerPod(t *testing.T, c *Cluster) (corev1.Container, []corev1.Volume) {
	t.Helper()
	d, err := APIServerDeployment(c, mustConfigMap(t, c), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range d.Spec.Template.Spec.Containers {
		if ct.Name == ComponentAPIServer {
			return ct, d.Spec.Template.Spec.Volumes
		}
	}
	t.Fatal("no kube-apiserver container")
	return corev1.Container{}, nil
}

// TestAuditModes: each mode's flags, ConfigMap key and volume, and that
// every path a flag names is on a volume the container mounts.
func TestAuditModes(t *testing.T) {
	two := int32(2)
	for _, tt := range []struct {
		name      string
		spec      v1alpha1.AuditSpec
		wantFlags map[string]string // "" value: the flag must be absent
		wantLimit string            // the audit volume's sizeLimit; "" no volume
	}{
		{
			name: "default: File, 100 MB, 3 backups",
			wantFlags: map[string]string{"audit-log-path": AuditLogFile, "audit-log-maxsize": "100", "audit-log-maxbackup": "3",
				"audit-policy-file": configDir + "/" + ConfigKeyAuditPolicy, "audit-log-format": "json"},
			wantLimit: "500Mi",
		},
		{
			name: "File with its own sizes",
			spec: v1alpha1.AuditSpec{Mode: v1alpha1.AuditFile, MaxSizeMB: 10, MaxBackups: &two},
			wantFlags: map[string]string{"audit-log-path": AuditLogFile, "audit-log-maxsize": "10", "audit-log-maxbackup": "2",
				"audit-policy-file": configDir + "/" + ConfigKeyAuditPolicy},
			wantLimit: "40Mi",
		},
		{
			name: "Stdout",
			spec: v1alpha1.AuditSpec{Mode: v1alpha1.AuditStdout},
			wantFlags: map[string]string{"audit-log-path": "-", "audit-log-maxsize": "", "audit-log-maxbackup": "",
				"audit-policy-file": configDir + "/" + ConfigKeyAuditPolicy, "audit-log-format": "json"},
		},
		{
			name:      "None",
			spec:      v1alpha1.AuditSpec{Mode: v1alpha1.AuditNone},
			wantFlags: map[string]string{"audit-log-path": "", "audit-policy-file": "", "audit-log-format": ""},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := resolveTC(t, auditSpec(tt.spec))
			flags, err := APIServerFlags(c)
			if err != nil {
				t.Fatal(err)
			}
			got := flagMap(t, flags)
			for k, want := range tt.wantFlags {
				if v, ok := got[k]; want == "" && ok || want != "" && v != want {
					t.Errorf("--%s = %q (set %v), want %q", k, v, ok, want)
				}
			}

			cm := mustConfigMap(t, c)
			_, hasPolicy := cm.Data[ConfigKeyAuditPolicy]
			if hasPolicy != (tt.spec.Mode != v1alpha1.AuditNone) {
				t.Errorf("ConfigMap has the audit policy: %v", hasPolicy)
			}

			ct, vols := apiServerPod(t, c)
			var audit *corev1.Volume
			for i := range vols {
				if vols[i].Name == volumeAudit {
					audit = &vols[i]
				}
				if cmv := vols[i].ConfigMap; cmv != nil {
					mounted := slices.ContainsFunc(cmv.Items, func(k corev1.KeyToPath) bool { return k.Key == ConfigKeyAuditPolicy })
					if mounted != hasPolicy {
						t.Errorf("the ConfigMap volume mounts the policy: %v, the ConfigMap has it: %v", mounted, hasPolicy)
					}
				}
			}
			mountedAt := func(dir string) bool {
				return slices.ContainsFunc(ct.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == dir })
			}
			switch {
			case tt.wantLimit == "" && audit != nil:
				t.Errorf("an audit volume in mode %q", tt.spec.Mode)
			case tt.wantLimit != "":
				if audit == nil || audit.EmptyDir == nil || audit.EmptyDir.SizeLimit == nil {
					t.Fatalf("audit volume %+v, want an emptyDir with a size limit", audit)
				}
				if got := audit.EmptyDir.SizeLimit.String(); got != tt.wantLimit {
					t.Errorf("audit volume sizeLimit %s, want %s", got, tt.wantLimit)
				}
				if !mountedAt(AuditDir) {
					t.Errorf("kube-apiserver does not mount %s: %+v", AuditDir, ct.VolumeMounts)
				}
			}
			if hasPolicy && !mountedAt(configDir) {
				t.Errorf("kube-apiserver does not mount %s", configDir)
			}
		})
	}
}

// TestAuditPolicyFromSpec: a policy in the spec replaces the default,
// canonically; a bad one is an error naming the field, whatever is wrong.
func TestAuditPolicyFromSpec(t *testing.T) {
	t.Run("a valid policy replaces the default", func(t *testing.T) {
		c := resolveTC(t, auditSpec(v1alpha1.AuditSpec{Policy: rawPolicy(
			`{"kind":"Policy","apiVersion":"audit.k8s.io/v1","rules":[{"level":"RequestResponse","resources":[{"group":"apps"}]},{"level":"Metadata"}]}`)}))
		p, err := auditpolicy.LoadPolicyFromBytes(c.Audit.Policy)
		if err != nil {
			t.Fatalf("the rendered policy does not load: %v\n%s", err, c.Audit.Policy)
		}
		if len(p.Rules) != 2 || p.Rules[0].Level != auditinternal.LevelRequestResponse || p.Rules[1].Level != auditinternal.LevelMetadata {
			t.Errorf("rendered policy rules %+v", p.Rules)
		}
	})
	big := `{"apiVersion":"audit.k8s.io/v1","kind":"Policy","rules":[` + strings.Repeat(`{"level":"Metadata"},`, 4000) + `{"level":"None"}]}`
	for _, tt := range []struct {
		name, policy, want string
	}{
		{"a misspelt field", `{"apiVersion":"audit.k8s.io/v1","kind":"Policy","rules":[{"levle":"Metadata"}]}`, `unknown field "levle"`},
		{"another kind", `{"apiVersion":"audit.k8s.io/v1","kind":"AuditPolicy","rules":[{"level":"Metadata"}]}`, "must be audit.k8s.io/v1 and Policy"},
		{"an old version", `{"apiVersion":"audit.k8s.io/v1beta1","kind":"Policy","rules":[{"level":"Metadata"}]}`, "must be audit.k8s.io/v1 and Policy"},
		{"an unknown level", `{"apiVersion":"audit.k8s.io/v1","kind":"Policy","rules":[{"level":"Everything"}]}`, "Everything"},
		{"no rules", `{"apiVersion":"audit.k8s.io/v1","kind":"Policy"}`, "0 rules"},
		{"an unknown stage", `{"apiVersion":"audit.k8s.io/v1","kind":"Policy","omitStages":["Never"],"rules":[{"level":"Metadata"}]}`, "Never"},
		{"not an object", `["Metadata"]`, "not an audit policy"},
		{"too large", big, "more than the 65536 allowed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Resolve(newTC(auditSpec(v1alpha1.AuditSpec{Policy: rawPolicy(tt.policy)})), testOptions())
			if err == nil {
				t.Fatal("admitted")
			}
			if !strings.Contains(err.Error(), "spec.apiServer.audit.policy") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want the field and %q", err, tt.want)
			}
		})
	}
	t.Run("mode None ignores the policy", func(t *testing.T) {
		c := resolveTC(t, auditSpec(v1alpha1.AuditSpec{Mode: v1alpha1.AuditNone, Policy: rawPolicy(`{}`)}))
		if c.Audit.Policy != nil {
			t.Errorf("policy rendered with mode None")
		}
	})
}

// TestAuditPolicyRollsOnlyTheAPIServer: a new policy changes the API
// server's pod template (its checksum) and nothing of the other
// components.
func TestAuditPolicyRollsOnlyTheAPIServer(t *testing.T) {
	before := resolveTC(t)
	after := resolveTC(t, auditSpec(v1alpha1.AuditSpec{Policy: rawPolicy(`{"apiVersion":"audit.k8s.io/v1","kind":"Policy","rules":[{"level":"Metadata"}]}`)}))
	sum := func(c *Cluster) (api, cm string) {
		t.Helper()
		config := mustConfigMap(t, c)
		a, err := APIServerDeployment(c, config, nil)
		if err != nil {
			t.Fatal(err)
		}
		m, err := ControllerManagerDeployment(c, config, nil)
		if err != nil {
			t.Fatal(err)
		}
		return a.Spec.Template.Annotations[v1alpha1.AnnotationChecksum], m.Spec.Template.Annotations[v1alpha1.AnnotationChecksum]
	}
	a1, m1 := sum(before)
	a2, m2 := sum(after)
	if a1 == a2 {
		t.Error("the API server's checksum did not change with the policy")
	}
	if m1 != m2 {
		t.Error("the controller manager's checksum changed with the audit policy")
	}
}

// TestDefaultAuditPolicy asks kube-apiserver's own policy evaluator what
// the default policy records of typical requests.
func TestDefaultAuditPolicy(t *testing.T) {
	c := resolveTC(t)
	p, err := auditpolicy.LoadPolicyFromBytes(c.Audit.Policy)
	if err != nil {
		t.Fatalf("the default policy does not load: %v", err)
	}
	eval := auditpolicy.NewPolicyRuleEvaluator(p)
	admin := &user.DefaultInfo{Name: "alice", Groups: []string{"system:authenticated"}}
	node := &user.DefaultInfo{Name: "system:node:m1", Groups: []string{"system:nodes", "system:authenticated"}}
	kcm := &user.DefaultInfo{Name: "system:kube-controller-manager", Groups: []string{"system:authenticated"}}
	res := func(u user.Info, verb, group, resource, sub string) authorizer.Attributes {
		return authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: group, APIVersion: "v1", Resource: resource,
			Subresource: sub, Namespace: "default", Name: "x", ResourceRequest: true}
	}
	for _, tt := range []struct {
		what  string
		attrs authorizer.Attributes
		want  auditinternal.Level
	}{
		{"a Secret read", res(admin, "get", "", "secrets", ""), auditinternal.LevelMetadata},
		{"a Secret written", res(admin, "create", "", "secrets", ""), auditinternal.LevelMetadata},
		{"a ConfigMap written", res(admin, "update", "", "configmaps", ""), auditinternal.LevelMetadata},
		{"a token requested", res(admin, "create", "", "serviceaccounts", "token"), auditinternal.LevelMetadata},
		{"a token review", res(admin, "create", "authentication.k8s.io", "tokenreviews", ""), auditinternal.LevelMetadata},
		{"a Deployment created", res(admin, "create", "apps", "deployments", ""), auditinternal.LevelRequest},
		{"a Pod deleted", res(admin, "delete", "", "pods", ""), auditinternal.LevelRequest},
		{"Pods listed", res(admin, "list", "", "pods", ""), auditinternal.LevelMetadata},
		{"an Event written", res(admin, "create", "events.k8s.io", "events", ""), auditinternal.LevelNone},
		{"a node's lease renewed", res(node, "update", "coordination.k8s.io", "leases", ""), auditinternal.LevelNone},
		{"a node's status patched", res(node, "patch", "", "nodes", "status"), auditinternal.LevelMetadata},
		{"a leader lease renewed", res(kcm, "update", "coordination.k8s.io", "leases", ""), auditinternal.LevelNone},
		{"a lease written by a user", res(admin, "update", "coordination.k8s.io", "leases", ""), auditinternal.LevelRequest},
		{"a health check", authorizer.AttributesRecord{User: admin, Verb: "get", Path: "/readyz"}, auditinternal.LevelNone},
		{"the metrics", authorizer.AttributesRecord{User: admin, Verb: "get", Path: "/metrics"}, auditinternal.LevelMetadata},
	} {
		if got := eval.EvaluatePolicyRule(tt.attrs).Level; got != tt.want {
			t.Errorf("%s: level %s, want %s", tt.what, got, tt.want)
		}
	}
	var asJSON map[string]any
	if err := json.Unmarshal(c.Audit.Policy, &asJSON); err != nil {
		t.Fatal(err)
	}
	if stages, _ := asJSON["omitStages"].([]any); len(stages) != 1 || stages[0] != "RequestReceived" {
		t.Errorf("omitStages %v, want [RequestReceived]", asJSON["omitStages"])
	}
}

// TestAuditFlagsProtected: the flags that name kubefarm's files or size its
// volume cannot be overridden; the other audit flags can.
func TestAuditFlagsProtected(t *testing.T) {
	for _, f := range []string{"audit-policy-file", "audit-log-path", "audit-log-maxsize", "audit-log-maxbackup", "audit-webhook-config-file"} {
		c := resolveTC(t, func(tc *v1alpha1.TenantCluster) { tc.Spec.APIServer.ExtraArgs = map[string]string{f: "1"} })
		if _, err := APIServerFlags(c); err == nil || !strings.Contains(err.Error(), "spec.apiServer.extraArgs["+f+"]") {
			t.Errorf("--%s: error %v, want it refused naming the field", f, err)
		}
	}
	c := resolveTC(t, func(tc *v1alpha1.TenantCluster) {
		tc.Spec.APIServer.ExtraArgs = map[string]string{"audit-log-compress": "true", "audit-log-maxage": "30"}
	})
	flags, err := APIServerFlags(c)
	if err != nil {
		t.Fatal(err)
	}
	if got := flagMap(t, flags); got["audit-log-compress"] != "true" || got["audit-log-maxage"] != "30" {
		t.Errorf("user audit flags not passed: %v", got)
	}
}

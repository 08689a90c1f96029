package desired

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	auditpolicy "k8s.io/apiserver/pkg/audit/policy"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// The API server's audit log: the policy is a key of the control plane
// ConfigMap (it holds no secret), so a changed policy rolls the API servers
// through the pod template's checksum like any other configuration.

const (
	// ConfigKeyAuditPolicy is the audit policy's key in the control plane
	// ConfigMap.
	ConfigKeyAuditPolicy = "audit-policy.json"
	// AuditDir is where the File mode's log and its rotated copies live in
	// the kube-apiserver container: an emptyDir volume of the pod.
	AuditDir = "/var/log/kubernetes/audit"
	// AuditLogFile is the File mode's current log.
	AuditLogFile = AuditDir + "/audit.log"
	volumeAudit  = "audit"

	defaultAuditMaxSizeMB  = 100
	defaultAuditMaxBackups = 3
	// maxAuditPolicyBytes bounds a policy given in the spec: it is copied
	// into a ConfigMap next to the rest of the configuration, and real
	// policies are a few kilobytes.
	maxAuditPolicyBytes = 64 << 10
)

// Audit is the resolved spec.apiServer.audit.
type Audit struct {
	Mode v1alpha1.AuditMode
	// Policy is the policy file's content (canonical JSON); nil with
	// mode None.
	Policy     []byte
	MaxSizeMB  int32
	MaxBackups int32
}

// VolumeSizeLimit bounds the File mode's volume: the current file and
// maxBackups rotated ones of at most maxSizeMB megabytes (the log writer's
// megabytes are MiB), plus one file of room for the write that crosses the
// limit while rotating, so the kubelet never evicts an API server for it.
func (a Audit) VolumeSizeLimit() resource.Quantity {
	return *resource.NewQuantity(int64(a.MaxBackups+2)*int64(a.MaxSizeMB)<<20, resource.BinarySI)
}

// DefaultAuditPolicy is the policy a tenant gets unless spec.apiServer.audit
// .policy replaces it. Rules are evaluated in order, the first match wins:
//   - nothing for what every component does every few seconds (health
//     checks, node and leader-election lease renewals) or for Events, which
//     are a record of their own;
//   - who touched a Secret, ConfigMap or token, and when, never the
//     contents (Metadata), whoever asks;
//   - the kubelets' writes (their node's status, their pods' status) at
//     Metadata: a farm of nodes writes them all day, and their bodies say
//     nothing about who changed the cluster;
//   - the body of every other change (Request);
//   - who read what (Metadata).
//
// The RequestReceived stage is omitted: each request is then recorded once
// it is answered (and once more when a long request, such as a watch,
// starts), not twice.
func DefaultAuditPolicy() auditv1.Policy {
	writes := []string{"create", "update", "patch", "delete", "deletecollection"}
	return auditv1.Policy{
		TypeMeta:   metav1.TypeMeta{APIVersion: auditv1.SchemeGroupVersion.String(), Kind: "Policy"},
		OmitStages: []auditv1.Stage{auditv1.StageRequestReceived},
		Rules: []auditv1.PolicyRule{
			{Level: auditv1.LevelNone, NonResourceURLs: []string{"/healthz*", "/livez*", "/readyz*", "/version"}},
			{Level: auditv1.LevelNone, Resources: []auditv1.GroupResources{
				{Group: "", Resources: []string{"events"}},
				{Group: "events.k8s.io", Resources: []string{"events"}},
			}},
			{Level: auditv1.LevelNone, UserGroups: []string{"system:nodes"}, Verbs: []string{"get", "update", "patch"},
				Resources: []auditv1.GroupResources{{Group: "coordination.k8s.io", Resources: []string{"leases"}}}},
			{Level: auditv1.LevelNone, Users: []string{"system:kube-controller-manager", "system:kube-scheduler"},
				Verbs:     []string{"get", "update"},
				Resources: []auditv1.GroupResources{{Group: "coordination.k8s.io", Resources: []string{"leases"}}}},
			{Level: auditv1.LevelMetadata, Resources: []auditv1.GroupResources{
				{Group: "", Resources: []string{"secrets", "configmaps", "serviceaccounts/token"}},
				{Group: "authentication.k8s.io", Resources: []string{"tokenreviews"}},
			}},
			{Level: auditv1.LevelMetadata, UserGroups: []string{"system:nodes"}, Verbs: writes},
			{Level: auditv1.LevelRequest, Verbs: writes},
			{Level: auditv1.LevelMetadata},
		},
	}
}

// resolveAudit checks spec.apiServer.audit and fills in its defaults. A
// policy from the spec is decoded strictly (a misspelt field is an error
// here, where kube-apiserver would only warn and drop it) and then loaded
// by kube-apiserver's own policy reader, so what is admitted here is what
// the API server starts with.
func resolveAudit(spec v1alpha1.AuditSpec, fp *field.Path) (Audit, field.ErrorList) {
	var errs field.ErrorList
	a := Audit{Mode: spec.Mode, MaxSizeMB: spec.MaxSizeMB, MaxBackups: defaultAuditMaxBackups}
	if a.Mode == "" {
		a.Mode = v1alpha1.AuditFile
	}
	if a.MaxSizeMB == 0 {
		a.MaxSizeMB = defaultAuditMaxSizeMB
	}
	if spec.MaxBackups != nil {
		a.MaxBackups = *spec.MaxBackups
	}
	switch a.Mode {
	case v1alpha1.AuditFile, v1alpha1.AuditStdout, v1alpha1.AuditNone:
	default:
		errs = append(errs, field.NotSupported(fp.Child("mode"), a.Mode,
			[]v1alpha1.AuditMode{v1alpha1.AuditFile, v1alpha1.AuditStdout, v1alpha1.AuditNone}))
	}
	if a.MaxSizeMB < 1 || a.MaxSizeMB > 1024 {
		errs = append(errs, field.Invalid(fp.Child("maxSizeMB"), a.MaxSizeMB, "must be 1-1024"))
	}
	if a.MaxBackups < 0 || a.MaxBackups > 20 {
		errs = append(errs, field.Invalid(fp.Child("maxBackups"), a.MaxBackups, "must be 0-20"))
	}
	if a.Mode == v1alpha1.AuditNone {
		return a, errs
	}
	policy := DefaultAuditPolicy()
	if spec.Policy != nil {
		p, err := decodeAuditPolicy(spec.Policy.Raw)
		if err != nil {
			// The value is not echoed: the error says what is wrong.
			errs = append(errs, field.Invalid(fp.Child("policy"), "(policy)", err.Error()))
			return a, errs
		}
		policy = p
	}
	b, err := json.MarshalIndent(policy, "", "  ")
	if err != nil {
		errs = append(errs, field.InternalError(fp.Child("policy"), err))
		return a, errs
	}
	a.Policy = append(b, '\n')
	return a, errs
}

// decodeAuditPolicy decodes an audit.k8s.io/v1 Policy strictly and loads
// it as kube-apiserver does.
func decodeAuditPolicy(raw []byte) (auditv1.Policy, error) {
	var p auditv1.Policy
	if len(raw) > maxAuditPolicyBytes {
		return p, fmt.Errorf("is %d bytes, more than the %d allowed", len(raw), maxAuditPolicyBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("not an audit policy: %w", err)
	}
	if dec.More() {
		return p, fmt.Errorf("not an audit policy: data after the object")
	}
	if p.APIVersion != auditv1.SchemeGroupVersion.String() || p.Kind != "Policy" {
		return p, fmt.Errorf("apiVersion and kind must be %s and Policy, not %q and %q", auditv1.SchemeGroupVersion, p.APIVersion, p.Kind)
	}
	if _, err := auditpolicy.LoadPolicyFromBytes(raw); err != nil {
		return p, err
	}
	return p, nil
}

// auditFlags are the kube-apiserver flags of the resolved audit settings.
func auditFlags(a Audit, d map[string]string) {
	switch a.Mode {
	case v1alpha1.AuditFile:
		d["audit-log-path"] = AuditLogFile
		d["audit-log-maxsize"] = strconv.Itoa(int(a.MaxSizeMB))
		d["audit-log-maxbackup"] = strconv.Itoa(int(a.MaxBackups))
	case v1alpha1.AuditStdout:
		d["audit-log-path"] = "-"
	default:
		return
	}
	d["audit-policy-file"] = configFile(ConfigKeyAuditPolicy)
	d["audit-log-format"] = "json"
}

// volume is the File mode's emptyDir, bounded by VolumeSizeLimit, and
// its mount; false in the other modes.
func (a Audit) volume() (corev1.Volume, corev1.VolumeMount, bool) {
	if a.Mode != v1alpha1.AuditFile {
		return corev1.Volume{}, corev1.VolumeMount{}, false
	}
	limit := a.VolumeSizeLimit()
	return corev1.Volume{Name: volumeAudit, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &limit}}},
		corev1.VolumeMount{Name: volumeAudit, MountPath: AuditDir}, true
}

package tenantcluster

import (
	"strings"
	"testing"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// TestParseRestoreVerdict: what a check Job's termination message can
// make the controller say. The pod's output is input: a reason that is no
// reason, an oversized or non-JSON message, or a pass without keys is
// reported as RestoreCheckFailed, never copied into the reason.
func TestParseRestoreVerdict(t *testing.T) {
	for _, c := range []struct {
		name, msg  string
		ok         bool
		wantReason string
		wantWhy    string
		wantSealed string
	}{
		{"a pass", `{"write":"key-2","sealed":"YWdlLWZpbGU="}`, true, "", "", "age-file"},
		{"a refusal", `{"reason":"BackupKeyWrong","error":"not sealed to it"}`, false, "BackupKeyWrong", "not sealed to it", ""},
		{"a reason that is no reason", `{"reason":"Bad reason: \n<script>","error":"x"}`, false, v1alpha1.ReasonRestoreCheckFailed, "x", ""},
		{"a reason too long", `{"reason":"` + strings.Repeat("A", 65) + `","error":"x"}`, false, v1alpha1.ReasonRestoreCheckFailed, "x", ""},
		{"an error without a reason", `{"error":"--identity: no age identity"}`, false, v1alpha1.ReasonRestoreCheckFailed, "--identity: no age identity", ""},
		{"a failure with an empty verdict", `{}`, false, v1alpha1.ReasonRestoreCheckFailed, "Job j failed", ""},
		{"the log's tail", "panic: runtime error", false, v1alpha1.ReasonRestoreCheckFailed, "Job j left no verdict: panic: runtime error", ""},
		{"oversized", `{"error":"` + strings.Repeat("x", 5000) + `"}`, false, v1alpha1.ReasonRestoreCheckFailed, "Job j left no verdict: {", ""},
		{"a pass without keys", `{"write":"key-1"}`, true, v1alpha1.ReasonRestoreCheckFailed, "handed back no keys", ""},
		{"a pass with keys that are not base64", `{"sealed":"***"}`, true, v1alpha1.ReasonRestoreCheckFailed, "handed back no keys", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			sealed, reason, why := parseRestoreVerdict("j", c.ok, c.msg, true)
			if reason != c.wantReason || !strings.Contains(why, c.wantWhy) || string(sealed) != c.wantSealed {
				t.Errorf("got %q, %q, sealed %q; want %q, a message with %q, sealed %q", reason, why, sealed, c.wantReason, c.wantWhy, c.wantSealed)
			}
			if len(why) > 1100 {
				t.Errorf("a message of %d bytes", len(why))
			}
		})
	}
	// A check of keys supplied by hand hands nothing back: a pass is a pass.
	if sealed, reason, _ := parseRestoreVerdict("j", true, `{"write":"key-1","keyNames":["key-1"]}`, false); reason != "" || sealed != nil {
		t.Errorf("a check of keys in the clear that passed: reason %q, sealed %q", reason, sealed)
	}
}

package desired

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Flag precedence (the contract documented on ComponentSpec.ExtraArgs):
//
//  1. kubefarm derives a default for each flag it needs from the TenantCluster;
//  2. a user extraArgs entry replaces the default of the same flag, or adds
//     a flag kubefarm does not set;
//  3. except for protected flags. A protected flag is one kubefarm needs to
//     keep the tenant secure or reachable: files only kubefarm mounts
//     (certificates, keys, kubeconfigs, generated configuration), the
//     addresses every other component is built against, and the
//     authorization and admission settings the tenancy model relies on.
//     Setting a fully protected flag is an error. A constrained flag may be
//     set when the value keeps what kubefarm needs (e.g. authorization-mode
//     must still contain Node and RBAC).
//
// Conflicts are reported as field errors naming the extraArgs entry, e.g.
// `spec.apiServer.extraArgs[client-ca-file]: Forbidden: ...`, never silently
// dropped: a user who asked for something must learn it did not happen.
//
// Keys may be written with or without leading dashes ("v" or "--v"). The
// output is "--key=value" sorted by key, so the same input always produces a
// byte-identical slice (and pod template).

// flagRule protects one flag. A nil check means "never settable".
type flagRule struct {
	reason string
	check  func(value string) error
}

type flagPolicy struct {
	exact    map[string]flagRule
	prefixes map[string]string // prefix -> reason; always fully protected
}

func (p flagPolicy) rule(key string) (flagRule, bool) {
	if r, ok := p.exact[key]; ok {
		return r, true
	}
	// Sorted so that overlapping prefixes report the same reason every time.
	for _, pfx := range slices.Sorted(maps.Keys(p.prefixes)) {
		if strings.HasPrefix(key, pfx) {
			return flagRule{reason: p.prefixes[pfx]}, true
		}
	}
	return flagRule{}, false
}

// mergeFlags merges defaults and user extra args under a policy and renders
// them. fieldPath is where the extra args live in the TenantCluster, used in
// errors. All errors are collected, in key order, so the user sees every
// conflict at once.
func mergeFlags(defaults map[string]string, policy flagPolicy, extra map[string]string, fieldPath *field.Path) ([]string, error) {
	merged := maps.Clone(defaults)
	if merged == nil {
		merged = map[string]string{}
	}
	var errs field.ErrorList
	seen := map[string]string{}
	for _, raw := range slices.Sorted(maps.Keys(extra)) {
		p := fieldPath.Key(raw)
		value := extra[raw]
		key := strings.TrimLeft(raw, "-")
		switch {
		case key == "" || strings.ContainsAny(key, "= \t\n"):
			errs = append(errs, field.Invalid(p, raw, "must be a flag name such as \"v\" or \"--v\", without '=' or spaces"))
			continue
		case seen[key] != "":
			errs = append(errs, field.Duplicate(p, fmt.Sprintf("same flag as extraArgs[%s]", seen[key])))
			continue
		}
		seen[key] = raw
		if r, ok := policy.rule(key); ok {
			if r.check == nil {
				errs = append(errs, field.Forbidden(p, "flag --"+key+" is set by kubefarm and cannot be overridden: "+r.reason))
				continue
			}
			if err := r.check(value); err != nil {
				errs = append(errs, field.Invalid(p, value, err.Error()+": "+r.reason))
				continue
			}
		}
		merged[key] = value
	}
	if err := errs.ToAggregate(); err != nil {
		return nil, err
	}
	return renderFlags(merged), nil
}

func renderFlags(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, "--"+k+"="+m[k])
	}
	return out
}

// Checks for constrained flags.

func mustBeTrue(v string) error {
	b, err := strconv.ParseBool(v)
	if err != nil || !b {
		return fmt.Errorf("must be true")
	}
	return nil
}

func listItems(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func mustContain(required ...string) func(string) error {
	return func(v string) error {
		items := listItems(v)
		for _, r := range required {
			if !slices.Contains(items, r) {
				return fmt.Errorf("must contain %s", strings.Join(required, ","))
			}
		}
		return nil
	}
}

func mustNotContain(forbidden ...string) func(string) error {
	return func(v string) error {
		items := listItems(v)
		for _, f := range forbidden {
			if slices.Contains(items, f) {
				return fmt.Errorf("must not contain %s", f)
			}
		}
		return nil
	}
}

func allOf(checks ...func(string) error) func(string) error {
	return func(v string) error {
		for _, c := range checks {
			if err := c(v); err != nil {
				return err
			}
		}
		return nil
	}
}

const (
	reasonFile      = "it points at a file kubefarm mounts"
	reasonIdentity  = "it decides who a client is, which the tenancy model depends on"
	reasonReachable = "other components and certificates are built against it"
	// The File mode's volume is sized from these two; larger files would
	// overrun it and the kubelet would evict the API server.
	reasonAuditVolume = "the audit volume is sized from spec.apiServer.audit.maxSizeMB and maxBackups; set them there"
)

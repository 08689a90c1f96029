package tenantcluster_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/webhooks/tenantcluster"
)

func cluster(version, observed string) *kubefarmv1.TenantCluster {
	return &kubefarmv1.TenantCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"},
		Spec:       kubefarmv1.TenantClusterSpec{Version: version},
		Status:     kubefarmv1.TenantClusterStatus{ObservedVersion: observed},
	}
}

var defaultWindow = &tenantcluster.VersionValidator{
	MinVersion: tenantcluster.DefaultMinVersion, MaxVersion: tenantcluster.DefaultMaxVersion,
}

// TestValidate covers every rule of the package documentation. old is
// {spec.version, status.observedVersion}; "" for the version means CREATE.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name               string
		oldSpec, oldStatus string
		next               string
		want               string // "" admits; otherwise a substring of the error
	}{
		// CREATE: format and window.
		{name: "create inside the window", next: "v1.34.4"},
		{name: "create at the lower bound", next: "v1.33.0"},
		{name: "create below the window", next: "v1.32.9", want: `spec.version: Invalid value: "v1.32.9": this kubefarm supports Kubernetes v1.33 to v1.34`},
		{name: "create above the window", next: "v1.35.0", want: "supports Kubernetes v1.33 to v1.34"},
		{name: "create with a bad format", next: "1.34.4", want: `spec.version: Invalid value: "1.34.4": must be v1.MINOR.PATCH`},
		{name: "create without a patch", next: "v1.34", want: "must be v1.MINOR.PATCH"},
		{name: "create with a leading zero", next: "v1.034.1", want: "without leading zeros: v1.34.1"},
		{name: "create with a huge minor", next: "v1.99999999999999999999.0", want: "must be v1.MINOR.PATCH"},

		// UPDATE without a version change: always, even outside the window.
		{name: "unchanged", oldSpec: "v1.34.4", oldStatus: "v1.34.4", next: "v1.34.4"},
		{name: "unchanged outside the window", oldSpec: "v1.30.1", oldStatus: "v1.30.1", next: "v1.30.1"},
		{name: "unchanged during a rollout", oldSpec: "v1.34.4", oldStatus: "v1.33.7", next: "v1.34.4"},

		// Upgrades.
		{name: "patch upgrade", oldSpec: "v1.34.1", oldStatus: "v1.34.1", next: "v1.34.4"},
		{name: "minor upgrade", oldSpec: "v1.33.7", oldStatus: "v1.33.7", next: "v1.34.0"},
		{name: "upgrade of a never-ready cluster", oldSpec: "v1.33.7", next: "v1.34.0"},
		// Skipped minors: the controller steps through them, so each must
		// be one this kubefarm runs.
		{name: "skipped minor", oldSpec: "v1.32.5", oldStatus: "v1.32.5", next: "v1.34.4"},
		{name: "skipped minor of a never-ready cluster", oldSpec: "v1.32.0", next: "v1.34.0"},
		{name: "skipped minor below the window", oldSpec: "v1.31.2", oldStatus: "v1.31.2", next: "v1.33.4",
			want: "spec.version: Forbidden: the upgrade from v1.31.2 to v1.33.4 steps through v1.32, which this kubefarm does not run " +
				"(it runs Kubernetes v1.33 to v1.34): upgrade to v1.32 with an earlier kubefarm release first"},
		{name: "skipped minor above the window", oldSpec: "v1.33.7", oldStatus: "v1.33.7", next: "v1.35.0", want: "supports Kubernetes v1.33 to v1.34"},
		{name: "upgrade above the window", oldSpec: "v1.34.4", oldStatus: "v1.34.4", next: "v1.35.0", want: "supports Kubernetes v1.33 to v1.34"},

		// Downgrades.
		{name: "minor downgrade", oldSpec: "v1.34.4", oldStatus: "v1.34.4", next: "v1.33.7",
			want: "spec.version: Forbidden: downgrade from v1.34.4 to v1.33.7 is not supported"},
		{name: "patch downgrade", oldSpec: "v1.34.4", oldStatus: "v1.34.4", next: "v1.34.3", want: "downgrade from v1.34.4 to v1.34.3"},
		{name: "downgrade of a never-ready cluster", oldSpec: "v1.34.4", next: "v1.34.3", want: "downgrade from v1.34.4 to v1.34.3"},

		// A rollout in progress (observed != old spec).
		{name: "new upgrade during a rollout", oldSpec: "v1.34.0", oldStatus: "v1.33.7", next: "v1.34.1",
			want: "spec.version: Forbidden: the previous rollout from v1.33.7 to v1.34.0 is still in progress (status.observedVersion is v1.33.7)"},
		{name: "rollback during a rollout", oldSpec: "v1.34.0", oldStatus: "v1.33.7", next: "v1.33.7"},
		{name: "rollback below the window during a rollout", oldSpec: "v1.33.0", oldStatus: "v1.32.5", next: "v1.32.5"},
		{name: "other downgrade during a rollout", oldSpec: "v1.34.0", oldStatus: "v1.33.7", next: "v1.33.6", want: "still in progress"},
		{name: "patch upgrade during a patch rollout", oldSpec: "v1.34.2", oldStatus: "v1.34.1", next: "v1.34.3", want: "still in progress"},
		{name: "observed with a leading zero is the same version", oldSpec: "v1.33.7", oldStatus: "v1.033.7", next: "v1.34.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var old *kubefarmv1.TenantCluster
			if tc.oldSpec != "" {
				old = cluster(tc.oldSpec, tc.oldStatus)
			}
			// The API server keeps the stored status on a main-resource
			// update; the new object carries it too.
			next := cluster(tc.next, tc.oldStatus)
			errs := defaultWindow.Validate(old, next)
			switch {
			case tc.want == "" && len(errs) > 0:
				t.Fatalf("rejected: %v", errs.ToAggregate())
			case tc.want != "" && len(errs) == 0:
				t.Fatalf("admitted, want %q", tc.want)
			case tc.want != "" && !strings.Contains(errs.ToAggregate().Error(), tc.want):
				t.Fatalf("error %q does not contain %q", errs.ToAggregate(), tc.want)
			}
			if len(errs) > 1 {
				t.Errorf("%d errors, want one: %v", len(errs), errs.ToAggregate())
			}
		})
	}
}

// TestValidateVersionChangeIgnoresWindow: the pure transition rules know no
// window; the validator adds it.
func TestValidateVersionChangeIgnoresWindow(t *testing.T) {
	if errs := tenantcluster.ValidateVersionChange(nil, cluster("v1.40.0", "")); len(errs) != 0 {
		t.Errorf("create outside any window: %v", errs.ToAggregate())
	}
	if errs := tenantcluster.ValidateVersionChange(cluster("v1.40.0", "v1.40.0"), cluster("v1.41.2", "")); len(errs) != 0 {
		t.Errorf("+1 minor: %v", errs.ToAggregate())
	}
	if errs := tenantcluster.ValidateVersionChange(cluster("v1.40.0", "v1.40.0"), cluster("v1.43.0", "")); len(errs) != 0 {
		t.Errorf("+3 minors: %v", errs.ToAggregate())
	}
	if errs := tenantcluster.ValidateVersionChange(cluster("v1.40.0", "v1.40.0"), cluster("v1.39.0", "")); len(errs) != 1 {
		t.Errorf("downgrade: %v", errs.ToAggregate())
	}
}

// TestBadWindowFailsClosed: a misconfigured window admits no version change
// (SetupWithManager refuses it earlier; this is the second line).
func TestBadWindowFailsClosed(t *testing.T) {
	for _, v := range []*tenantcluster.VersionValidator{
		{MinVersion: "v1.34", MaxVersion: "v1.33"},
		{MinVersion: "1.33", MaxVersion: "v1.34"},
		{MinVersion: "v1.33", MaxVersion: "v1.34.1"},
		{},
	} {
		errs := v.Validate(nil, cluster("v1.34.0", ""))
		if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), "Internal error") {
			t.Errorf("window %q..%q: %v, want an internal error", v.MinVersion, v.MaxVersion, errs.ToAggregate())
		}
		// Updates that leave the version alone need no window.
		if errs := v.Validate(cluster("v1.34.0", ""), cluster("v1.34.0", "")); len(errs) != 0 {
			t.Errorf("window %q..%q rejected an unchanged version: %v", v.MinVersion, v.MaxVersion, errs.ToAggregate())
		}
	}
}

package redfish

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stmcginnis/gofish/common"
	gfredfish "github.com/stmcginnis/gofish/redfish"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/power"
)

func TestParseAddress(t *testing.T) {
	for _, tc := range []struct {
		in       string
		insecure bool
		want     address
		err      string
	}{
		{in: "https://bmc.example", want: address{Endpoint: "https://bmc.example"}},
		{in: "https://10.0.0.5:8443", want: address{Endpoint: "https://10.0.0.5:8443"}},
		{in: "https://bmc/", want: address{Endpoint: "https://bmc"}},
		{in: "https://bmc/redfish/v1/Systems/System.Embedded.1",
			want: address{Endpoint: "https://bmc", SystemPath: "/redfish/v1/Systems/System.Embedded.1"}},
		{in: "http://bmc:8000/redfish/v1/Systems/1", insecure: true,
			want: address{Endpoint: "http://bmc:8000", SystemPath: "/redfish/v1/Systems/1"}},
		{in: "http://bmc", err: "sends the BMC password in clear"},
		{in: "ftp://bmc", err: "a redfish address is https://"},
		{in: "bmc:443", err: "a redfish address is https://"},
		{in: "https://user:pw@bmc", err: "only scheme, host, port"},
		{in: "https://bmc?x=1", err: "only scheme, host, port"},
		{in: "https://bmc/redfish/v1/Managers/1", err: "the path must be /redfish/v1/Systems/<id>"},
		{in: "https://bmc/redfish/v1/Systems/a/b", err: "the path must be"},
		{in: "https://", err: "only scheme, host, port"},
	} {
		got, err := parseAddress(tc.in, tc.insecure)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "spec.power.address") {
				t.Errorf("parseAddress(%q) error = %v, want one naming spec.power.address with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseAddress(%q) = %+v, %v, want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestSelectSystem(t *testing.T) {
	if i, err := selectSystem([]string{"/redfish/v1/Systems/1"}); i != 0 || err != nil {
		t.Errorf("one system: %d, %v", i, err)
	}
	if _, err := selectSystem(nil); err == nil || !strings.Contains(err.Error(), "no ComputerSystem") {
		t.Errorf("no system: %v", err)
	}
	_, err := selectSystem([]string{"/redfish/v1/Systems/a", "/redfish/v1/Systems/b", "/redfish/v1/Systems/c"})
	if err == nil || !strings.Contains(err.Error(), "lists 3 ComputerSystems") ||
		!strings.Contains(err.Error(), "/redfish/v1/Systems/b") || !strings.Contains(err.Error(), "spec.power.address") {
		t.Errorf("three systems: %v, want the count, the ids and the field", err)
	}
}

func TestChooseReset(t *testing.T) {
	all := []gfredfish.ResetType{"On", "ForceOff", "GracefulShutdown", "ForceRestart", "Nmi", "ForceOn"}
	withCycle := append(append([]gfredfish.ResetType{}, all...), "PowerCycle")
	for _, tc := range []struct {
		name    string
		op      operation
		state   gfredfish.PowerState
		allowed []gfredfish.ResetType
		want    gfredfish.ResetType
		err     bool
	}{
		{"on", opOn, "Off", all, "On", false},
		{"on, only ForceOn allowed", opOn, "Off", []gfredfish.ResetType{"ForceOn", "ForceOff"}, "ForceOn", false},
		{"on, nothing listed", opOn, "Off", nil, "On", false},
		{"off", opOff, "On", all, "ForceOff", false},
		{"off not allowed", opOff, "On", []gfredfish.ResetType{"On"}, "", true},
		{"cycle without PowerCycle", opCycle, "On", all, "ForceRestart", false},
		{"cycle with PowerCycle", opCycle, "On", withCycle, "PowerCycle", false},
		{"cycle, nothing listed", opCycle, "On", nil, "ForceRestart", false},
		{"cycle of an off machine", opCycle, "Off", withCycle, "On", false},
		{"cycle while powering on", opCycle, "PoweringOn", all, "ForceRestart", false},
		{"cycle, only GracefulRestart", opCycle, "On", []gfredfish.ResetType{"GracefulRestart"}, "", true},
	} {
		got, err := chooseReset(tc.op, tc.state, tc.allowed)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("%s: chooseReset = %q, %v, want %q (error %v)", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func TestStateOf(t *testing.T) {
	for in, want := range map[gfredfish.PowerState]power.State{
		"On": power.StateOn, "Off": power.StateOff, "PoweringOn": power.StateUnknown,
		"PoweringOff": power.StateUnknown, "Paused": power.StateUnknown, "": power.StateUnknown,
	} {
		if got := stateOf(in); got != want {
			t.Errorf("stateOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDescribe(t *testing.T) {
	target := func(insecure bool, ca []byte) power.Target {
		return power.Target{Machine: "farm/m1", Password: "s3cret", CA: ca, Spec: v1alpha1.PowerSpec{
			Driver: "redfish", Address: "https://bmc:443", InsecureSkipVerify: insecure}}
	}
	extended := []byte(`{"error":{"code":"Base.1.0.GeneralError","message":"A general error has occurred.",` +
		`"@Message.ExtendedInfo":[{"MessageId":"Base.1.8.ActionNotSupported","Message":"The action Reset is not supported.","Resolution":"Use another ResetType."}]}}`)
	for _, tc := range []struct {
		name     string
		t        power.Target
		err      error
		contains []string
		absent   []string
		auth     bool
	}{
		{name: "redfish message", t: target(false, nil), err: fmt.Errorf("reset On: %w", common.ConstructError(400, extended)),
			contains: []string{"machine farm/m1: redfish power on at https://bmc:443: reset On: HTTP 400: Base.1.0.GeneralError",
				"The action Reset is not supported. (Base.1.8.ActionNotSupported); resolution: Use another ResetType."},
			absent: []string{`"@Message.ExtendedInfo"`, "s3cret", "verification off"}},
		{name: "401 not Redfish JSON", t: target(false, nil), err: common.ConstructError(401, []byte(`{"error": {"message": "Unauthorized", "code": 401}}`)),
			contains: []string{"HTTP 401", "Unauthorized", "spec.power.credentialsSecret"}, auth: true},
		{name: "403", t: target(false, nil), err: common.ConstructError(403, []byte(`{"error":{"code":"Base.1.0.InsufficientPrivilege","message":"no"}}`)),
			contains: []string{"HTTP 403: Base.1.0.InsufficientPrivilege: no"}, auth: true},
		{name: "500 is not auth", t: target(false, nil), err: common.ConstructError(500, []byte("<html>oops</html>")),
			contains: []string{"HTTP 500: <html>oops</html>"}},
		{name: "certificate, system roots", t: target(false, nil), err: fmt.Errorf("Get: %w", x509.UnknownAuthorityError{}),
			contains: []string{"does not verify against the system roots: name its CA in spec.power.caSecret"}},
		{name: "certificate, caSecret", t: target(false, []byte("pem")), err: fmt.Errorf("Get: %w", x509.UnknownAuthorityError{}),
			contains: []string{"does not verify against spec.power.caSecret's ca.crt"}},
		{name: "insecure says so", t: target(true, nil), err: errors.New("connection refused"),
			contains: []string{"connection refused", "TLS certificate verification off: spec.power.insecureSkipVerify"}},
	} {
		got := describe(tc.t, "power on", tc.err)
		for _, want := range tc.contains {
			if !strings.Contains(got.Error(), want) {
				t.Errorf("%s: %q lacks %q", tc.name, got, want)
			}
		}
		for _, bad := range tc.absent {
			if strings.Contains(got.Error(), bad) {
				t.Errorf("%s: %q contains %q", tc.name, got, bad)
			}
		}
		if errors.Is(got, power.ErrAuth) != tc.auth {
			t.Errorf("%s: errors.Is(ErrAuth) = %v, want %v", tc.name, !tc.auth, tc.auth)
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("%s: the cause is not wrapped", tc.name)
		}
	}
}

func TestWarning(t *testing.T) {
	spec := v1alpha1.PowerSpec{Driver: "redfish", Address: "https://bmc"}
	if w := Warning(power.Target{Machine: "farm/m1", Spec: spec}); w != "" {
		t.Errorf("verified target: warning %q", w)
	}
	spec.InsecureSkipVerify = true
	w := Warning(power.Target{Machine: "farm/m1", Spec: spec})
	for _, want := range []string{"farm/m1", "https://bmc", "certificate verification off", "spec.power.insecureSkipVerify"} {
		if !strings.Contains(w, want) {
			t.Errorf("warning %q lacks %q", w, want)
		}
	}
}

package plugin

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func discoveredWithBMC(bmc string) *v1alpha1.DiscoveredMachine {
	dm := discovered("52:54:00:12:34:56", "10.28.72.14")
	dm.Spec.Hardware.BMCAddress = bmc
	return dm
}

func ipmiPower(addr string) *v1alpha1.PowerSpec {
	return &v1alpha1.PowerSpec{Driver: v1alpha1.PowerIPMI, Address: addr, CredentialsSecret: "bmc"}
}

// enrollPowerCases are TestEnrollPower's table: the flags and the BMC
// address the machine reported, and the power or the error's words.
var enrollPowerCases = []struct {
	name    string
	flags   PowerFlags
	bmc     string // the DiscoveredMachine's spec.hardware.bmcAddress
	want    *v1alpha1.PowerSpec
	wantErr []string
}{
	{name: "no power flags: no power", bmc: "10.20.0.21"},
	{name: "ipmi, the reported BMC address by default", flags: PowerFlags{Driver: "ipmi", Credentials: "bmc"}, bmc: "10.20.0.21",
		want: ipmiPower("10.20.0.21")},
	{name: "ipmi, --power-address wins", flags: PowerFlags{Driver: "ipmi", Address: "127.0.0.1:623", Credentials: "bmc"}, bmc: "10.20.0.21",
		want: ipmiPower("127.0.0.1:623")},
	{name: "ipmi, a host name", flags: PowerFlags{Driver: "ipmi", Address: "bmc-a1.rack1.example", Credentials: "bmc"},
		want: ipmiPower("bmc-a1.rack1.example")},
	{name: "ipmi, no address reported nor given", flags: PowerFlags{Driver: "ipmi", Credentials: "bmc"},
		wantErr: []string{"--power-address is required", "spec.hardware.bmcAddress", "52-54-00-12-34-56"}},
	{name: "ipmi, a URL", flags: PowerFlags{Driver: "ipmi", Address: "https://10.20.0.21", Credentials: "bmc"},
		wantErr: []string{"--power-address", "an ipmi address is host or host:port"}},
	{name: "ipmi, port 0", flags: PowerFlags{Driver: "ipmi", Address: "10.20.0.21:0", Credentials: "bmc"},
		wantErr: []string{"--power-address", "port 0"}},
	{name: "ipmi, port 99999", flags: PowerFlags{Driver: "ipmi", Address: "10.20.0.21:99999", Credentials: "bmc"},
		wantErr: []string{"--power-address", "port 99999"}},
	{name: "ipmi, address too long", flags: PowerFlags{Driver: "ipmi", Address: strings.Repeat("a", 256), Credentials: "bmc"},
		wantErr: []string{"--power-address is 256 characters, at most 255"}},
	{name: "ipmi without credentials", flags: PowerFlags{Driver: "ipmi", Address: "10.20.0.21"},
		wantErr: []string{"--power-credentials is required with --power-driver ipmi", "kubefarm.io/bmc-credentials=true"}},
	{name: "ipmi with --power-ca", flags: PowerFlags{Driver: "ipmi", Address: "10.20.0.21", Credentials: "bmc", CA: "bmc-ca"},
		wantErr: []string{"--power-ca is for --power-driver redfish"}},
	{name: "ipmi with --power-insecure-skip-verify", flags: PowerFlags{Driver: "ipmi", Address: "10.20.0.21", Credentials: "bmc", InsecureSkipVerify: true},
		wantErr: []string{"--power-insecure-skip-verify is for --power-driver redfish"}},
	{name: "credentials not a Secret name", flags: PowerFlags{Driver: "ipmi", Address: "10.20.0.21", Credentials: "BMC_rack1"},
		wantErr: []string{"--power-credentials \"BMC_rack1\" is not a Secret name"}},
	{name: "redfish, https with a system",
		flags: PowerFlags{Driver: "redfish", Address: "https://10.20.0.31/redfish/v1/Systems/System.Embedded.1", Credentials: "bmc", CA: "bmc-ca"},
		want: &v1alpha1.PowerSpec{Driver: v1alpha1.PowerRedfish, Address: "https://10.20.0.31/redfish/v1/Systems/System.Embedded.1",
			CredentialsSecret: "bmc", CASecret: "bmc-ca"}},
	{name: "redfish, http with --power-insecure-skip-verify",
		flags: PowerFlags{Driver: "redfish", Address: "http://10.20.0.31:8000", Credentials: "bmc", InsecureSkipVerify: true},
		want:  &v1alpha1.PowerSpec{Driver: v1alpha1.PowerRedfish, Address: "http://10.20.0.31:8000", CredentialsSecret: "bmc", InsecureSkipVerify: true}},
	{name: "redfish, no address: not discoverable, the reported BMC as a hint", flags: PowerFlags{Driver: "redfish", Credentials: "bmc"}, bmc: "10.20.0.31",
		wantErr: []string{"--power-address is required with --power-driver redfish", "https://10.20.0.31"}},
	{name: "redfish, a bare host", flags: PowerFlags{Driver: "redfish", Address: "10.20.0.31", Credentials: "bmc"},
		wantErr: []string{"--power-address \"10.20.0.31\"", "a redfish address is https://host[:port]"}},
	{name: "redfish, another path", flags: PowerFlags{Driver: "redfish", Address: "https://10.20.0.31/redfish/v1/Chassis/1", Credentials: "bmc"},
		wantErr: []string{"a redfish address is https://host[:port], optionally with /redfish/v1/Systems/<id>"}},
	{name: "redfish, http without --power-insecure-skip-verify", flags: PowerFlags{Driver: "redfish", Address: "http://10.20.0.31", Credentials: "bmc"},
		wantErr: []string{"plain http://", "--power-insecure-skip-verify"}},
	{name: "redfish, CA and insecure",
		flags:   PowerFlags{Driver: "redfish", Address: "https://10.20.0.31", Credentials: "bmc", CA: "bmc-ca", InsecureSkipVerify: true},
		wantErr: []string{"--power-ca and --power-insecure-skip-verify contradict each other"}},
	{name: "redfish, CA not a Secret name", flags: PowerFlags{Driver: "redfish", Address: "https://10.20.0.31", Credentials: "bmc", CA: "-ca"},
		wantErr: []string{"--power-ca \"-ca\" is not a Secret name"}},
	{name: "redfish without credentials", flags: PowerFlags{Driver: "redfish", Address: "https://10.20.0.31"},
		wantErr: []string{"--power-credentials is required with --power-driver redfish"}},
	{name: "qmp refused", flags: PowerFlags{Driver: "qmp", Address: "tcp://127.0.0.1:4444"},
		wantErr: []string{"--power-driver qmp", "test farm's QEMU machines", "use ipmi or redfish"}},
	{name: "unknown driver", flags: PowerFlags{Driver: "ilo", Address: "10.20.0.21", Credentials: "bmc"},
		wantErr: []string{"--power-driver \"ilo\": want ipmi or redfish"}},
	{name: "--power-address without a driver", flags: PowerFlags{Address: "10.20.0.21"},
		wantErr: []string{"--power-address needs --power-driver"}},
	{name: "--power-credentials without a driver", flags: PowerFlags{Credentials: "bmc"},
		wantErr: []string{"--power-credentials needs --power-driver"}},
	{name: "--power-ca without a driver", flags: PowerFlags{CA: "bmc-ca"},
		wantErr: []string{"--power-ca needs --power-driver"}},
	{name: "--power-insecure-skip-verify without a driver", flags: PowerFlags{InsecureSkipVerify: true},
		wantErr: []string{"--power-insecure-skip-verify needs --power-driver"}},
}

func TestEnrollPower(t *testing.T) {
	for _, tc := range enrollPowerCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EnrollPower(tc.flags, discoveredWithBMC(tc.bmc))
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("power %+v, want an error saying %q", got, tc.wantErr)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("power %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestPowerSecretWarnings(t *testing.T) {
	ipmi := &v1alpha1.PowerSpec{Driver: v1alpha1.PowerIPMI, Address: "10.20.0.21", CredentialsSecret: "bmc"}
	redfish := &v1alpha1.PowerSpec{Driver: v1alpha1.PowerRedfish, Address: "https://10.20.0.31", CredentialsSecret: "bmc", CASecret: "bmc-ca"}
	secret := func(labelled bool, data ...string) SecretRead {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "farm1", Name: "x"}, Data: map[string][]byte{}}
		if labelled {
			s.Labels = map[string]string{v1alpha1.LabelBMCCredentials: "true"}
		}
		for _, k := range data {
			s.Data[k] = []byte("v")
		}
		return SecretRead{Secret: s}
	}
	good := secret(true, "username", "password")
	for _, tc := range []struct {
		name      string
		power     *v1alpha1.PowerSpec
		creds, ca SecretRead
		want      [][]string // per warning, what it says
	}{
		{name: "no power", power: nil, creds: SecretRead{NotFound: true}},
		{name: "labelled, both keys", power: ipmi, creds: good},
		{name: "missing", power: ipmi, creds: SecretRead{NotFound: true},
			want: [][]string{{"Secret farm1/bmc (--power-credentials) does not exist", "kubefarm.io/bmc-credentials=true", "username and password"}}},
		{name: "forbidden", power: ipmi, creds: SecretRead{Forbidden: true},
			want: [][]string{{"could not check Secret farm1/bmc", "may not read Secrets in namespace farm1", "kubefarm.io/bmc-credentials=true"}}},
		{name: "another error", power: ipmi, creds: SecretRead{Err: errors.New("the server is currently unable to handle the request")},
			want: [][]string{{"could not check Secret farm1/bmc (--power-credentials): the server is currently unable", "kubefarm.io/bmc-credentials=true"}}},
		{name: "unlabelled", power: ipmi, creds: secret(false, "username", "password"),
			want: [][]string{{"lacks the label kubefarm.io/bmc-credentials=true", "kubectl label secret -n farm1 bmc kubefarm.io/bmc-credentials=true"}}},
		{name: "labelled false", power: ipmi, creds: func() SecretRead {
			r := secret(true, "username", "password")
			r.Secret.Labels[v1alpha1.LabelBMCCredentials] = "false"
			return r
		}(), want: [][]string{{"lacks the label"}}},
		{name: "no password", power: ipmi, creds: secret(true, "username"),
			want: [][]string{{"Secret farm1/bmc (--power-credentials) has no non-empty key \"password\""}}},
		{name: "redfish, CA fine", power: redfish, creds: good, ca: secret(false, "ca.crt")},
		{name: "redfish, CA missing", power: redfish, creds: good, ca: SecretRead{NotFound: true},
			want: [][]string{{"Secret farm1/bmc-ca (--power-ca) does not exist", "ca.crt"}}},
		{name: "redfish, CA without ca.crt", power: redfish, creds: good, ca: secret(false, "tls.crt"),
			want: [][]string{{"Secret farm1/bmc-ca (--power-ca) has no key ca.crt"}}},
		{name: "redfish, both forbidden", power: redfish, creds: SecretRead{Forbidden: true}, ca: SecretRead{Forbidden: true},
			want: [][]string{{"could not check Secret farm1/bmc "}, {"could not check Secret farm1/bmc-ca (--power-ca)"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := PowerSecretWarnings("farm1", tc.power, tc.creds, tc.ca)
			if len(got) != len(tc.want) {
				t.Fatalf("warnings %q, want %d", got, len(tc.want))
			}
			for i, says := range tc.want {
				for _, s := range says {
					if !strings.Contains(got[i], s) {
						t.Errorf("warning %q does not say %q", got[i], s)
					}
				}
			}
		})
	}
}

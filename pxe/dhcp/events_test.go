package dhcp

import (
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
	"k8s.io/client-go/tools/record"

	"github.com/kubefarm/kubefarm/pxe/events"
)

func TestMachineEvents(t *testing.T) {
	fake := record.NewFakeRecorder(32)
	cfg := testConfig()
	cfg.Events = events.New(fake, events.Config{})
	s, _ := testServer(t, cfg, tableWith(testLease()))
	pxeBIOS := []dhcpv4.Modifier{withArch(iana.INTEL_X86PC), withVendor("PXEClient:Arch:00000")}

	steps := []struct {
		name string
		req  *dhcpv4.DHCPv4
		want string // prefix of the recorded event; "" for none
	}{
		{"offer", request(dhcpv4.MessageTypeDiscover, pxeBIOS...),
			`Normal Offered offered 10.28.0.11 to 52:54:00:12:34:56, boot file "undionly.kpxe"`},
		{"a repeated offer within the interval is throttled", request(dhcpv4.MessageTypeDiscover, pxeBIOS...), ""},
		{"ack", request(dhcpv4.MessageTypeRequest, append(pxeBIOS, withSID(serverID), withReqIP(leaseIP))...),
			`Normal Acked acked 10.28.0.11 to 52:54:00:12:34:56 for 30m0s, boot file "undionly.kpxe"`},
		{"unknown MAC: no machine, no event", request(dhcpv4.MessageTypeDiscover, dhcpv4.WithHwAddr([]byte{2, 0, 0, 0, 0, 1})), ""},
		{"request for another server: nothing to tell", request(dhcpv4.MessageTypeRequest, withSID(otherID), withReqIP(leaseIP)), ""},
		{"relay outside the subnet", request(dhcpv4.MessageTypeDiscover, append(pxeBIOS, dhcpv4.WithRelay(foreignIP))...),
			"Warning Refused ignored a DISCOVER for 52:54:00:12:34:56 relayed through 192.0.2.7, which is outside the machine's subnet 10.28.0.0/16"},
		{"decline", request(dhcpv4.MessageTypeDecline, withSID(serverID), withReqIP(leaseIP)),
			"Warning Declined 52:54:00:12:34:56 declined 10.28.0.11 (DHCPDECLINE)"},
	}
	for _, st := range steps {
		s.recordEvent(s.handle(st.req.ToBytes(), nil))
		var got []string
		for len(fake.Events) > 0 {
			got = append(got, <-fake.Events)
		}
		switch {
		case st.want == "" && len(got) != 0:
			t.Errorf("%s: recorded %q, want nothing", st.name, got)
		case st.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], st.want)):
			t.Errorf("%s: recorded %q, want one event starting %q", st.name, got, st.want)
		}
	}
}

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

// armed records the MACs Config.Boots was told of.
type armed []string

func (a *armed) Arm(mac string) { *a = append(*a, mac) }

// TestArmBoot: only an offer or ack sent to the iPXE of a known machine
// arms its boot (the HTTP service then issues the boot's secret once): not
// the firmware's PXE request before iPXE, not the node's own DHCP client
// after the boot (udhcpc, systemd-networkd), not an unknown MAC, not a
// request for another server.
func TestArmBoot(t *testing.T) {
	var got armed
	cfg := testConfig()
	cfg.Boots = &got
	s, _ := testServer(t, cfg, tableWith(testLease()))
	pxeBIOS := []dhcpv4.Modifier{withArch(iana.INTEL_X86PC), withVendor("PXEClient:Arch:00000")}
	ipxe := append(pxeBIOS, dhcpv4.WithUserClass("iPXE", false))
	for _, st := range []struct {
		name string
		req  *dhcpv4.DHCPv4
		arms bool
	}{
		{"firmware PXE discover", request(dhcpv4.MessageTypeDiscover, pxeBIOS...), false},
		{"iPXE discover", request(dhcpv4.MessageTypeDiscover, ipxe...), true},
		{"iPXE request", request(dhcpv4.MessageTypeRequest, append(ipxe, withSID(serverID), withReqIP(leaseIP))...), true},
		{"iPXE, RFC 3004 user class", request(dhcpv4.MessageTypeDiscover, dhcpv4.WithUserClass("iPXE", true)), true},
		{"the node's own DHCP client", request(dhcpv4.MessageTypeDiscover, withVendor("udhcp 1.35.0")), false},
		{"iPXE request for another server", request(dhcpv4.MessageTypeRequest, append(ipxe, withSID(otherID), withReqIP(leaseIP))...), false},
		{"iPXE of an unknown MAC", request(dhcpv4.MessageTypeDiscover, append(ipxe, dhcpv4.WithHwAddr([]byte{2, 0, 0, 0, 0, 1}))...), false},
		{"iPXE release", request(dhcpv4.MessageTypeRelease, append(ipxe, withSID(serverID))...), false},
	} {
		got = nil
		s.armBoot(s.handle(st.req.ToBytes(), nil))
		switch {
		case st.arms && (len(got) != 1 || got[0] != "52:54:00:12:34:56"):
			t.Errorf("%s: armed %q, want 52:54:00:12:34:56", st.name, got)
		case !st.arms && len(got) != 0:
			t.Errorf("%s: armed %q, want nothing", st.name, got)
		}
	}
}

package routeradv

import (
	"net"
	"net/netip"
	"testing"

	"github.com/mdlayher/ndp"
)

func TestAdvertisementAnnouncesNothing(t *testing.T) {
	mac, _ := net.ParseMAC("52:54:00:12:34:56")
	for _, tc := range []struct {
		name    string
		mac     net.HardwareAddr
		options int
	}{
		{"with the interface's link-layer address", mac, 1},
		{"without one (not Ethernet)", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ra := Advertisement(tc.mac)
			// Marshal and parse back: what goes on the wire is what iPXE reads.
			b, err := ndp.MarshalMessage(ra)
			if err != nil {
				t.Fatal(err)
			}
			m, err := ndp.ParseMessage(b)
			if err != nil {
				t.Fatal(err)
			}
			got := m.(*ndp.RouterAdvertisement)
			if got.RouterLifetime != 0 || got.ManagedConfiguration || got.OtherConfiguration || got.CurrentHopLimit != 0 ||
				got.ReachableTime != 0 || got.RetransmitTimer != 0 || got.NeighborDiscoveryProxy || got.MobileIPv6HomeAgent {
				t.Errorf("advertisement announces something: %+v", got)
			}
			if len(got.Options) != tc.options {
				t.Fatalf("options %v, want %d", got.Options, tc.options)
			}
			for _, o := range got.Options {
				lla, ok := o.(*ndp.LinkLayerAddress)
				if !ok || lla.Direction != ndp.Source || lla.Addr.String() != tc.mac.String() {
					t.Errorf("option %#v, want only the source link-layer address %s", o, tc.mac)
				}
			}
		})
	}
}

func TestDestination(t *testing.T) {
	for src, want := range map[string]string{
		"fe80::5054:ff:fe77:11": "fe80::5054:ff:fe77:11",
		"::":                    "ff02::1",
		"10.0.0.1":              "ff02::1",
	} {
		if got := Destination(netip.MustParseAddr(src)); got.String() != want {
			t.Errorf("Destination(%s) = %s, want %s", src, got, want)
		}
	}
}

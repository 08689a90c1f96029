package dhcp

import (
	"net"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

func TestShed(t *testing.T) {
	cases := []struct {
		mt       dhcpv4.MessageType
		queued   int
		capacity int
		want     bool
	}{
		{dhcpv4.MessageTypeDiscover, 0, 1024, false},
		{dhcpv4.MessageTypeDiscover, 511, 1024, false},
		{dhcpv4.MessageTypeDiscover, 512, 1024, true},  // half full: new exchanges wait
		{dhcpv4.MessageTypeRequest, 512, 1024, false},  // finishing ones do not
		{dhcpv4.MessageTypeRequest, 1024, 1024, false}, // (the full queue drops it later)
		{dhcpv4.MessageTypeRelease, 900, 1024, false},
		{dhcpv4.MessageTypeDiscover, 0, 1, false}, // the smallest queue still serves
		{dhcpv4.MessageTypeDiscover, 1, 1, true},
	}
	for _, c := range cases {
		if got := shed(c.mt, c.queued, c.capacity); got != c.want {
			t.Errorf("shed(%v, %d/%d) = %v, want %v", c.mt, c.queued, c.capacity, got, c.want)
		}
	}
}

func TestPeekMessageType(t *testing.T) {
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	discover, err := dhcpv4.NewDiscovery(mac)
	if err != nil {
		t.Fatal(err)
	}
	request, err := dhcpv4.NewRequestFromOffer(mustOffer(t, discover))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		pkt  []byte
		want dhcpv4.MessageType
		ok   bool
	}{
		{"discover", discover.ToBytes(), dhcpv4.MessageTypeDiscover, true},
		{"request", request.ToBytes(), dhcpv4.MessageTypeRequest, true},
		{"short", discover.ToBytes()[:100], 0, false},
		{"no cookie", append(make([]byte, 240), 53, 1, 1), 0, false},
		{"truncated option", append(discover.ToBytes()[:240], 12, 200, 'x'), 0, false},
		{"end before 53", append(append(discover.ToBytes()[:240:240], 255), 53, 1, 1), 0, false},
	} {
		got, ok := peekMessageType(c.pkt)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: peekMessageType = %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
		// The peek agrees with the full parser whenever it answers.
		if ok {
			if p, err := dhcpv4.FromBytes(c.pkt); err != nil || p.MessageType() != got {
				t.Errorf("%s: peek says %v, parser says %v (%v)", c.name, got, p.MessageType(), err)
			}
		}
	}
}

func mustOffer(t *testing.T, d *dhcpv4.DHCPv4) *dhcpv4.DHCPv4 {
	t.Helper()
	o, err := dhcpv4.NewReplyFromRequest(d, dhcpv4.WithMessageType(dhcpv4.MessageTypeOffer),
		dhcpv4.WithServerIP(net.IPv4(10, 0, 0, 1)), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 0, 0, 1))))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// FuzzPeekMessageType: the peek never panics and never contradicts the parser.
func FuzzPeekMessageType(f *testing.F) {
	d, _ := dhcpv4.NewDiscovery(net.HardwareAddr{2, 0, 0, 0, 0, 1})
	f.Add(d.ToBytes())
	f.Fuzz(func(t *testing.T, pkt []byte) {
		mt, ok := peekMessageType(pkt)
		if !ok {
			return
		}
		if p, err := dhcpv4.FromBytes(pkt); err == nil && p.MessageType() != mt {
			// Duplicate option 53s: the parser keeps the last, the peek the first.
			if countOption53(pkt) == 1 {
				t.Fatalf("peek %v, parser %v", mt, p.MessageType())
			}
		}
	})
}

func countOption53(pkt []byte) int {
	n := 0
	for i := 240; i+1 < len(pkt); {
		switch pkt[i] {
		case 0:
			i++
			continue
		case 255:
			return n
		}
		if pkt[i] == 53 {
			n++
		}
		i += 2 + int(pkt[i+1])
	}
	return n
}

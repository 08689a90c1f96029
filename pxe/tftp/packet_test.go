package tftp

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func TestParseRequest(t *testing.T) {
	long := strings.Repeat("x", maxOptionLen+1)
	for _, tc := range []struct {
		name string
		in   string
		want request
		err  error
	}{
		{"plain RRQ", "\x00\x01ipxe.efi\x00octet\x00", request{name: "ipxe.efi", mode: "octet"}, nil},
		{"WRQ", "\x00\x02a\x00octet\x00", request{write: true, name: "a", mode: "octet"}, nil},
		{"mode and option names lower-cased, values kept", "\x00\x01a\x00OCTET\x00BlkSize\x001468\x00TSIZE\x000\x00",
			request{name: "a", mode: "octet", options: []option{{"blksize", "1468"}, {"tsize", "0"}}}, nil},
		{"first of a repeated option wins", "\x00\x01a\x00octet\x00blksize\x00512\x00blksize\x001468\x00",
			request{name: "a", mode: "octet", options: []option{{"blksize", "512"}}}, nil},
		{"NUL padding after the options", "\x00\x01a\x00octet\x00tsize\x000\x00\x00\x00\x00",
			request{name: "a", mode: "octet", options: []option{{"tsize", "0"}}}, nil},
		{"option without value dropped", "\x00\x01a\x00octet\x00tsize\x000\x00blksize\x00",
			request{name: "a", mode: "octet", options: []option{{"tsize", "0"}}}, nil},
		{"unterminated option dropped", "\x00\x01a\x00octet\x00tsize",
			request{name: "a", mode: "octet"}, nil},
		{"over-long option dropped", "\x00\x01a\x00octet\x00" + long + "\x001\x00tsize\x00" + long + "\x00windowsize\x004\x00",
			request{name: "a", mode: "octet", options: []option{{"windowsize", "4"}}}, nil},
		{"empty", "", request{}, errShort},
		{"one byte", "\x00", request{}, errShort},
		{"DATA on the service port", "\x00\x03\x00\x01data", request{}, errNotRequest},
		{"ACK on the service port", "\x00\x04\x00\x01", request{}, errNotRequest},
		{"name not terminated", "\x00\x01ipxe.efi", request{}, errUnterminated},
		{"mode not terminated", "\x00\x01ipxe.efi\x00octet", request{}, errUnterminated},
		{"over 512 bytes", "\x00\x01a\x00octet\x00" + strings.Repeat("\x00", 505), request{}, errTooLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseRequest([]byte(tc.in))
			if err != tc.err {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err == nil && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestASCIILower(t *testing.T) {
	for in, want := range map[string]string{"": "", "octet": "octet", "OcTeT": "octet", "BLKSIZE": "blksize", "\xffA\xc3": "\xffa\xc3"} {
		if got := asciiLower(in); got != want {
			t.Errorf("asciiLower(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseRequestKeepsAtMostMaxOptions(t *testing.T) {
	p := []byte("\x00\x01a\x00octet\x00")
	for i := range maxOptions + 3 {
		p = append(p, "o"+string(rune('a'+i))+"\x001\x00"...)
	}
	r, err := parseRequest(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.options) != maxOptions {
		t.Fatalf("%d options kept, want %d", len(r.options), maxOptions)
	}
}

// FuzzParseRequest: whatever arrives on port 69, the parser neither panics
// nor keeps more than its bounds, what it accepts is a request whose name
// came from the packet, and its options negotiate to terms within the caps.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		"\x00\x01ipxe.efi\x00octet\x00blksize\x001468\x00tsize\x000\x00windowsize\x004\x00",
		"\x00\x02a\x00netascii\x00",
		"\x00\x01\x00\x00",
		"\x00\x01a\x00octet\x00\x00\x00",
		"\x00\x05\x00\x01oops\x00",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := parseRequest(p)
		if err != nil {
			return
		}
		if len(p) > maxRequestLen {
			t.Fatalf("accepted a %d-byte request", len(p))
		}
		if len(r.options) > maxOptions {
			t.Fatalf("%d options", len(r.options))
		}
		for _, o := range r.options {
			if len(o.name) == 0 || len(o.name) > maxOptionLen || len(o.value) > maxOptionLen || o.name != asciiLower(o.name) {
				t.Fatalf("option %+v out of bounds", o)
			}
		}
		if !bytes.Contains(p, []byte(r.name+"\x00")) {
			t.Fatalf("name %q not in the packet", r.name)
		}
		// Whatever the options, the terms stay within the server's caps.
		tm := negotiate(r.options, 850528, limits{maxBlockSize: 1468, maxWindowSize: 16})
		if tm.blockSize < minBlockSize || tm.blockSize > 1468 || tm.windowSize < 1 || tm.windowSize > 16 || len(tm.oack) > len(r.options) {
			t.Fatalf("options %+v negotiated to %+v", r.options, tm)
		}
	})
}

func TestParseReply(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want reply
	}{
		{"ACK", "\x00\x04\x01\x02", reply{ack: true, block: 0x0102}},
		{"ACK with trailing bytes", "\x00\x04\x00\x07xx", reply{ack: true, block: 7}},
		{"ERROR", "\x00\x05\x00\x08option refused\x00", reply{abort: true, msg: "option refused"}},
		{"ERROR text unterminated", "\x00\x05\x00\x00gone", reply{abort: true, msg: "gone"}},
		{"short ACK", "\x00\x04\x00", reply{}},
		{"DATA from the client", "\x00\x03\x00\x01x", reply{}},
		{"RRQ on a transfer's port", "\x00\x01a\x00octet\x00", reply{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseReply([]byte(tc.in)); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestPacketBuilders(t *testing.T) {
	if got := string(appendOACK(nil, []option{{"blksize", "1468"}, {"tsize", "42"}})); got != "\x00\x06blksize\x001468\x00tsize\x0042\x00" {
		t.Errorf("OACK %q", got)
	}
	if got := string(appendError(nil, errCodeNotFound, "file not found")); got != "\x00\x05\x00\x01file not found\x00" {
		t.Errorf("ERROR %q", got)
	}
}

func TestNegotiate(t *testing.T) {
	lim := limits{maxBlockSize: 1468, maxWindowSize: 16}
	for _, tc := range []struct {
		name string
		opts []option
		lim  limits
		want terms
	}{
		{"no options: RFC 1350", nil, lim, terms{blockSize: 512, windowSize: 1}},
		{"blksize granted", []option{{"blksize", "1428"}}, lim,
			terms{blockSize: 1428, windowSize: 1, oack: []option{{"blksize", "1428"}}}},
		{"blksize capped", []option{{"blksize", "65464"}}, lim,
			terms{blockSize: 1468, windowSize: 1, oack: []option{{"blksize", "1468"}}}},
		{"blksize capped by the interface's MTU", []option{{"blksize", "1468"}}, limits{maxBlockSize: mtuBlockSize(1400), maxWindowSize: 16},
			terms{blockSize: 1368, windowSize: 1, oack: []option{{"blksize", "1368"}}}},
		{"blksize out of range ignored", []option{{"blksize", "7"}, {"tsize", "0"}}, lim,
			terms{blockSize: 512, windowSize: 1, oack: []option{{"tsize", "850528"}}}},
		{"blksize not a number ignored", []option{{"blksize", "0x5bc"}}, lim, terms{blockSize: 512, windowSize: 1}},
		{"tsize answered with the size", []option{{"tsize", "0"}}, lim,
			terms{blockSize: 512, windowSize: 1, oack: []option{{"tsize", "850528"}}}},
		{"tsize not a number ignored", []option{{"tsize", "-1"}}, lim, terms{blockSize: 512, windowSize: 1}},
		{"EDK2's request, in its order", []option{{"blksize", "1468"}, {"windowsize", "4"}, {"tsize", "0"}}, lim,
			terms{blockSize: 1468, windowSize: 4, oack: []option{{"blksize", "1468"}, {"windowsize", "4"}, {"tsize", "850528"}}}},
		{"windowsize capped", []option{{"windowsize", "64"}}, lim,
			terms{blockSize: 512, windowSize: 16, oack: []option{{"windowsize", "16"}}}},
		{"windowsize off: left out", []option{{"windowsize", "4"}}, limits{maxBlockSize: 1468, maxWindowSize: 1},
			terms{blockSize: 512, windowSize: 1}},
		{"windowsize 0 ignored", []option{{"windowsize", "0"}}, lim, terms{blockSize: 512, windowSize: 1}},
		{"timeout and unknown options left out", []option{{"timeout", "6"}, {"multicast", ""}}, lim, terms{blockSize: 512, windowSize: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := negotiate(tc.opts, 850528, tc.lim); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

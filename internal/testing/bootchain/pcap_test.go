package bootchain

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// wireTrace is what the virtual machine's NIC saw, read from the packet
// capture qemu's filter-dump writes: the client's side of every stage.
type wireTrace struct {
	// Lines is a readable trace, one line per interesting packet.
	Lines []string
	// DHCP replies to the machine: message type and boot file, and what the
	// client said about itself in the request that preceded them.
	Replies []dhcpReply
	// TFTPReads are the file names of TFTP read requests.
	TFTPReads []string
	// TFTPAsked and TFTPGranted are the options of the (last) read request
	// and of the server's option acknowledgement; TFTPData and TFTPAcks
	// count the DATA packets the machine received and the ACKs it sent.
	TFTPAsked, TFTPGranted map[string]string
	TFTPData, TFTPAcks     int
	// HTTPRequests are the request lines ("GET /boot/... HTTP/1.1").
	HTTPRequests []string
	// BootServerRequests counts UDP packets to port 4011 (PXE boot server
	// or ProxyDHCP requests).
	BootServerRequests int
	// Unreachable are the UDP ports of ICMP destination unreachable
	// messages.
	Unreachable []uint16
	// Order is the machine's router discovery and HTTP requests in the
	// order they crossed the wire: "RS" (a router solicitation from the
	// machine), "RA" (a router advertisement to it, unicast or to all
	// nodes) and "GET <path>".
	Order []string
}

type dhcpReply struct {
	Type     dhcpv4.MessageType
	YourIP   net.IP
	BootFile string
	// ClientIPXE and ClientArch describe the request with the same
	// transaction ID: user class "iPXE" and option 93 (-1: absent).
	ClientIPXE bool
	ClientArch int
	// VendorClass is the reply's option 60, VendorOptions its option 43.
	VendorClass   string
	VendorOptions []byte
	// IPXEOptions is the reply's option 175, iPXE's own.
	IPXEOptions []byte
}

func (t *wireTrace) String() string { return strings.Join(t.Lines, "\n") }

// readPcap parses a classic pcap file of Ethernet frames (what qemu's
// filter-dump writes) for DHCP, TFTP and HTTP packets of client mac.
func readPcap(path string, mac net.HardwareAddr) (*wireTrace, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < 24 {
		return nil, errors.New("pcap file shorter than its header")
	}
	var bo binary.ByteOrder = binary.LittleEndian
	switch binary.LittleEndian.Uint32(b) {
	case 0xa1b2c3d4:
	case 0xd4c3b2a1:
		bo = binary.BigEndian
	default:
		return nil, fmt.Errorf("not a pcap file (magic %x)", b[:4])
	}
	tr := &wireTrace{}
	requests := map[dhcpv4.TransactionID]*dhcpv4.DHCPv4{}
	var t0 uint32
	for off := 24; off+16 <= len(b); {
		sec, usec, incl := bo.Uint32(b[off:]), bo.Uint32(b[off+4:]), int(bo.Uint32(b[off+8:]))
		off += 16
		if off+incl > len(b) {
			break // a capture cut short by the VM's end
		}
		frame := b[off : off+incl]
		off += incl
		if t0 == 0 {
			t0 = sec
		}
		at := fmt.Sprintf("%4d.%03ds", sec-t0, usec/1000)
		if len(frame) >= 14+40+1 && binary.BigEndian.Uint16(frame[12:]) == 0x86dd && frame[14+6] == 58 {
			// ICMPv6 (router or neighbour solicitations, say): the time a
			// client spends on IPv6 shows between its IPv4 stages.
			tr.Lines = append(tr.Lines, fmt.Sprintf("%s ICMPv6 type %d from %s", at, frame[14+40], net.IP(frame[14+8:14+24])))
			switch typ := frame[14+40]; {
			case typ == 133 && bytes.Equal(frame[6:12], mac):
				tr.Order = append(tr.Order, "RS")
			case typ == 134 && (bytes.Equal(frame[0:6], mac) || bytes.Equal(frame[0:6], []byte{0x33, 0x33, 0, 0, 0, 1})):
				tr.Order = append(tr.Order, "RA")
			}
			continue
		}
		if len(frame) < 14+20 || binary.BigEndian.Uint16(frame[12:]) != 0x0800 {
			continue
		}
		ip := frame[14:]
		ihl := int(ip[0]&0x0f) * 4
		if ihl < 20 || len(ip) < ihl {
			continue
		}
		src, dst, proto := net.IP(ip[12:16]), net.IP(ip[16:20]), ip[9]
		l4 := ip[ihl:]
		switch {
		case proto == 17 && len(l4) >= 8:
			sport, dport := binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
			payload := l4[8:]
			switch {
			case dport == 67 || sport == 67:
				m, err := dhcpv4.FromBytes(payload)
				if err != nil || !bytes.Equal(m.ClientHWAddr, mac) {
					continue
				}
				if m.OpCode == dhcpv4.OpcodeBootRequest {
					requests[m.TransactionID] = m
					tr.Lines = append(tr.Lines, fmt.Sprintf("%s DHCP %s from %s user-class=%q arch=%v vendor=%q",
						at, m.MessageType(), m.ClientHWAddr, m.UserClass(), archOf(m), m.ClassIdentifier()))
					continue
				}
				r := dhcpReply{Type: m.MessageType(), YourIP: m.YourIPAddr, BootFile: m.BootFileNameOption(), ClientArch: -1,
					VendorClass: m.ClassIdentifier(), VendorOptions: m.Options.Get(dhcpv4.OptionVendorSpecificInformation),
					IPXEOptions: m.Options.Get(dhcpv4.GenericOptionCode(175))}
				if r.BootFile == "" {
					r.BootFile = m.BootFileName
				}
				if req, ok := requests[m.TransactionID]; ok {
					r.ClientArch = archOf(req)
					for _, c := range req.UserClass() {
						r.ClientIPXE = r.ClientIPXE || c == "iPXE"
					}
				}
				tr.Replies = append(tr.Replies, r)
				tr.Lines = append(tr.Lines, fmt.Sprintf("%s DHCP %s from %s: yiaddr %s siaddr %s file %q vendor=%q opt43=%x opt175=%x",
					at, r.Type, src, r.YourIP, m.ServerIPAddr, r.BootFile, r.VendorClass, r.VendorOptions, r.IPXEOptions))
			case dport == 69 && len(payload) > 2 && binary.BigEndian.Uint16(payload) == 1:
				name, _, _ := bytes.Cut(payload[2:], []byte{0})
				tr.TFTPReads = append(tr.TFTPReads, string(name))
				tr.TFTPAsked = tftpOptions(payload[2:], 2)
				tr.Lines = append(tr.Lines, fmt.Sprintf("%s TFTP RRQ %q from %s to %s, options %v", at, name, src, dst, tr.TFTPAsked))
			case dport == 4011:
				tr.BootServerRequests++
				tr.Lines = append(tr.Lines, fmt.Sprintf("%s UDP %s:%d -> %s:4011 (PXE boot server request), %d bytes", at, src, sport, dst, len(payload)))
			case sport == 69 || dport == 69 || sport > 1023 && dport > 1023:
				// TFTP data and acknowledgements: too many to list, so
				// counted; the option acknowledgement is listed.
				if len(payload) < 2 {
					continue
				}
				switch binary.BigEndian.Uint16(payload) {
				case 3:
					// The capture is the machine's NIC, and the machine
					// serves no TFTP: DATA comes to it, ACKs from it.
					tr.TFTPData++
				case 4:
					tr.TFTPAcks++
				case 6:
					tr.TFTPGranted = tftpOptions(payload[2:], 0)
					tr.Lines = append(tr.Lines, fmt.Sprintf("%s TFTP OACK from %s:%d: %v", at, src, sport, tr.TFTPGranted))
				}
			default:
				tr.Lines = append(tr.Lines, fmt.Sprintf("%s UDP %s:%d -> %s:%d, %d bytes", at, src, sport, dst, dport, len(payload)))
			}
		case proto == 1 && len(l4) >= 36 && l4[0] == 3 && len(l4) >= 8+int(l4[8]&0x0f)*4+4:
			// Destination unreachable: which UDP port was closed.
			port := binary.BigEndian.Uint16(l4[8+int(l4[8]&0x0f)*4+2:])
			tr.Unreachable = append(tr.Unreachable, port)
			tr.Lines = append(tr.Lines, fmt.Sprintf("%s ICMP unreachable (code %d) %s -> %s for port %d", at, l4[1], src, dst, port))
		case proto == 6 && len(l4) >= 20:
			doff := int(l4[12]>>4) * 4
			if doff < 20 || len(l4) < doff {
				continue
			}
			payload := l4[doff:]
			for _, method := range []string{"GET ", "HEAD ", "POST "} {
				if bytes.HasPrefix(payload, []byte(method)) {
					line, _, _ := bytes.Cut(payload, []byte("\r\n"))
					// iPXE escapes ':' in paths; compare unescaped.
					if u, err := url.PathUnescape(string(line)); err == nil {
						line = []byte(u)
					}
					tr.HTTPRequests = append(tr.HTTPRequests, string(line))
					if method == "GET " {
						path, _, _ := strings.Cut(strings.TrimPrefix(string(line), method), " ")
						tr.Order = append(tr.Order, "GET "+path)
					}
					tr.Lines = append(tr.Lines, fmt.Sprintf("%s HTTP %s -> %s: %s", at, src, dst, line))
				}
			}
			if bytes.HasPrefix(payload, []byte("HTTP/1.")) {
				line, _, _ := bytes.Cut(payload, []byte("\r\n"))
				tr.Lines = append(tr.Lines, fmt.Sprintf("%s HTTP %s -> %s: %s", at, src, dst, line))
			}
		}
	}
	return tr, nil
}

// archOf returns the first option 93 value, or -1 when absent.
func archOf(m *dhcpv4.DHCPv4) int {
	raw := m.Options.Get(dhcpv4.OptionClientSystemArchitectureType)
	if len(raw) < 2 {
		return -1
	}
	return int(binary.BigEndian.Uint16(raw))
}

// tftpOptions reads the NUL-separated name and value pairs of a TFTP
// request or option acknowledgement, after skip leading fields (a
// request's file name and mode), names lower-cased.
func tftpOptions(b []byte, skip int) map[string]string {
	f := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if len(f) < skip {
		return nil
	}
	opts := map[string]string{}
	for i := skip; i+1 < len(f); i += 2 {
		opts[strings.ToLower(f[i])] = f[i+1]
	}
	return opts
}

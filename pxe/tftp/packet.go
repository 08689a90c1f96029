package tftp

import (
	"bytes"
	"encoding/binary"
	"errors"
)

// TFTP opcodes (RFC 1350, OACK from RFC 2347).
const (
	opRRQ   = 1
	opWRQ   = 2
	opDATA  = 3
	opACK   = 4
	opERROR = 5
	opOACK  = 6
)

// Error codes of an ERROR packet (RFC 1350, 8 from RFC 2347).
const (
	errCodeUndefined       = 0
	errCodeNotFound        = 1
	errCodeAccessViolation = 2
	errCodeIllegalOp       = 4
)

// Bounds on a request. RFC 2347 keeps a request with its options within 512
// bytes; the read buffer is larger so that an oversized request is seen
// whole and refused rather than read truncated and half-understood.
const (
	maxRequestLen   = 512
	maxOptions      = 8
	maxOptionLen    = 32 // an option's name or value, e.g. "windowsize", "65464"
	requestReadSize = 1024
)

// Parse errors of a request. The server drops a malformed request without
// an answer: a reply to a forged source would make it a reflector.
var (
	errShort        = errors.New("packet too short")
	errTooLong      = errors.New("request longer than 512 bytes")
	errNotRequest   = errors.New("not a read or write request")
	errUnterminated = errors.New("field not terminated by NUL")
)

// option is one option of a request, its name lower-cased (RFC 2347: names
// are case-insensitive).
type option struct {
	name, value string
}

// request is a parsed RRQ or WRQ.
type request struct {
	write bool
	name  string
	mode  string // lower-cased
	// options in the order the client sent them; the first of a repeated
	// name, at most maxOptions, each name and value at most maxOptionLen
	// bytes. Others are dropped, as RFC 2347 lets a server ignore options.
	options []option
}

// parseRequest parses a packet read on the service's port. It is pure and
// bounded: it reads at most maxRequestLen bytes and keeps at most
// maxOptions options.
func parseRequest(p []byte) (request, error) {
	var r request
	if len(p) < 2 {
		return r, errShort
	}
	if len(p) > maxRequestLen {
		return r, errTooLong
	}
	switch binary.BigEndian.Uint16(p) {
	case opRRQ:
	case opWRQ:
		r.write = true
	default:
		return r, errNotRequest
	}
	rest := p[2:]
	field := func() (string, bool) {
		f, after, ok := bytes.Cut(rest, []byte{0})
		if !ok {
			return "", false
		}
		rest = after
		return string(f), true
	}
	var ok bool
	if r.name, ok = field(); !ok {
		return r, errUnterminated
	}
	mode, ok := field()
	if !ok {
		return r, errUnterminated
	}
	r.mode = asciiLower(mode)
	// Options: name and value pairs. Some firmware pads its request with
	// NULs, so an empty name ends the list; so does a name without value.
	for len(rest) > 0 {
		name, ok := field()
		if !ok || name == "" {
			break
		}
		value, ok := field()
		if !ok {
			break
		}
		if len(r.options) == maxOptions || len(name) > maxOptionLen || len(value) > maxOptionLen {
			continue
		}
		name = asciiLower(name)
		seen := false
		for _, o := range r.options {
			seen = seen || o.name == name
		}
		if !seen {
			r.options = append(r.options, option{name, value})
		}
	}
	return r, nil
}

// asciiLower lower-cases the ASCII letters of s and leaves every other byte
// as it is: option names and modes are ASCII, and strings.ToLower would
// turn a byte that is not UTF-8 into a 3-byte replacement character.
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// appendOACK appends an option acknowledgement carrying opts in order.
func appendOACK(b []byte, opts []option) []byte {
	b = binary.BigEndian.AppendUint16(b, opOACK)
	for _, o := range opts {
		b = append(b, o.name...)
		b = append(b, 0)
		b = append(b, o.value...)
		b = append(b, 0)
	}
	return b
}

// appendError appends an ERROR packet. msg goes to the client: it must not
// name server paths.
func appendError(b []byte, code uint16, msg string) []byte {
	b = binary.BigEndian.AppendUint16(b, opERROR)
	b = binary.BigEndian.AppendUint16(b, code)
	b = append(b, msg...)
	return append(b, 0)
}

// reply is what a client sends during a transfer: an ACK of a block, or an
// ERROR that ends the transfer.
type reply struct {
	ack   bool
	block uint16
	// abort is set for an ERROR packet; its text is msg.
	abort bool
	msg   string
}

// parseReply reads a packet received on a transfer's socket. Anything other
// than an ACK or an ERROR (a stray or garbled packet) is reported as
// neither, and the transfer ignores it.
func parseReply(p []byte) reply {
	if len(p) < 4 {
		return reply{}
	}
	switch binary.BigEndian.Uint16(p) {
	case opACK:
		return reply{ack: true, block: binary.BigEndian.Uint16(p[2:])}
	case opERROR:
		msg, _, _ := bytes.Cut(p[4:], []byte{0})
		if len(msg) > maxOptionLen*4 {
			msg = msg[:maxOptionLen*4]
		}
		return reply{abort: true, msg: string(msg)}
	}
	return reply{}
}

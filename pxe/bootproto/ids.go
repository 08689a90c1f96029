package bootproto

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"
)

// NormalizeMAC turns a MAC as a client or a URL may spell it (upper case,
// '-' or ':' separated) into the form the API stores: lower case, colon
// separated. Only 6-byte Ethernet addresses are accepted. The error never
// quotes the input (it may be anything a client sent).
func NormalizeMAC(s string) (string, error) {
	if len(s) != 17 {
		return "", errors.New("not a 6-byte MAC address")
	}
	sep := s[2]
	if sep != ':' && sep != '-' {
		return "", errors.New("not a 6-byte MAC address")
	}
	var b strings.Builder
	b.Grow(17)
	for i := 0; i < 17; i++ {
		c := s[i]
		if i%3 == 2 {
			// Mixed separators are rejected: no client sends them.
			if c != sep {
				return "", errors.New("not a 6-byte MAC address")
			}
			b.WriteByte(':')
			continue
		}
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
		case c >= 'A' && c <= 'F':
			c += 'a' - 'A'
		default:
			return "", errors.New("not a 6-byte MAC address")
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}

// DigestHex is the hex of a digest sha256:<64 lower-case hex>, and whether
// d is one.
func DigestHex(d string) (string, bool) {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != 64 {
		return "", false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", false
		}
	}
	return h, true
}

// ValidDigest reports whether d is sha256:<64 lower-case hex>.
func ValidDigest(d string) bool {
	_, ok := DigestHex(d)
	return ok
}

// ValidBootID reports whether s is the kernel's boot_id form: 8-4-4-4-12
// lower-case hex.
func ValidBootID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// Printable reports whether s is valid, printable UTF-8: text a node sends
// becomes conditions, events and log lines that people read.
func Printable(s string) bool {
	for _, c := range s {
		if c == utf8.RuneError || !unicode.IsPrint(c) {
			return false
		}
	}
	return true
}

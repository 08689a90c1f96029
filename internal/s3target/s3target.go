// Package s3target holds the rules for where an etcd snapshot goes in an
// S3-compatible store: the endpoint URL, the bucket name and the key
// prefix. Both the TenantCluster builder (which refuses a bad
// spec.etcd.backup.s3 naming the field) and kubefarm-etcd (which refuses a
// bad flag) apply them, so the two can never disagree. Pure: no I/O.
package s3target

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// MaxPrefix bounds a key prefix: S3 keys are at most 1024 bytes, and a
// snapshot's name after the prefix needs room.
const MaxPrefix = 256

// ValidateEndpoint accepts https://host[:port] or http://host[:port] and
// nothing more: a path would be taken as a bucket by path-style requests,
// and credentials belong in the environment, never in a URL.
func ValidateEndpoint(s string) error {
	if s == "" {
		return errors.New("is required")
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("not a URL: %v", err)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return errors.New("must be https://host[:port] (or http:// for a store reached without TLS)")
	}
	if u.User != nil {
		return errors.New("must not carry credentials: they come from the credentials Secret")
	}
	if u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return errors.New("must be scheme://host[:port], nothing after the port")
	}
	if u.Hostname() == "" {
		return errors.New("has no host")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q must be a number from 1 to 65535", p)
		}
	}
	return nil
}

// ValidateBucket applies S3's bucket naming rules: 3 to 63 characters,
// lowercase letters, digits, '.' and '-', starting and ending with a letter
// or digit, no "..", and not an IP address.
func ValidateBucket(s string) error {
	if len(s) < 3 || len(s) > 63 {
		return errors.New("must be 3 to 63 characters")
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '-') {
			return errors.New("must hold only lowercase letters, digits, '.' and '-'")
		}
	}
	if !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return errors.New("must start and end with a lowercase letter or digit")
	}
	if strings.Contains(s, "..") {
		return errors.New("must not contain \"..\"")
	}
	if net.ParseIP(s) != nil {
		return errors.New("must not be an IP address")
	}
	return nil
}

// ValidatePrefix accepts an empty prefix or a "folder" ending in '/': at
// most MaxPrefix bytes of letters, digits, '.', '_', '-' and '/', no
// leading '/', no empty, "." or ".." segment (stores differ in what they
// make of those, and a file-backed store would escape its bucket).
func ValidatePrefix(s string) error {
	if s == "" {
		return nil
	}
	if len(s) > MaxPrefix {
		return fmt.Errorf("must be at most %d bytes", MaxPrefix)
	}
	if !strings.HasSuffix(s, "/") {
		return errors.New("must end with '/'")
	}
	for _, r := range s {
		if !(alnum(byte(r)) && r < 0x80 || r >= 'A' && r <= 'Z' || r == '.' || r == '_' || r == '-' || r == '/') {
			return errors.New("must hold only letters, digits, '.', '_', '-' and '/'")
		}
	}
	for _, seg := range strings.Split(strings.TrimSuffix(s, "/"), "/") {
		if seg == "" || seg == "." || seg == ".." {
			return errors.New("must not start with '/' or hold an empty, \".\" or \"..\" segment")
		}
	}
	return nil
}

func alnum(b byte) bool { return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' }

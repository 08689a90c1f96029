// Package s3target holds the rules for where an etcd snapshot goes in an
// S3-compatible store: the endpoint URL, the bucket name, the key prefix
// and the region; and the names of the environment variables the
// credentials travel in. Both the TenantCluster builder (which refuses a bad
// spec.etcd.backup.s3 naming the field) and kubefarm-etcd (which refuses a
// bad flag naming the flag) apply them, so the two can never disagree.
// Messages never repeat what may be a credential. Pure: no I/O.
package s3target

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// The environment variables kubefarm-etcd reads the S3 credentials from,
// and only from (the AWS SDKs' names): never a flag, which the pod spec, ps
// and the CronJob's object would show. The backup CronJob sets the first two
// from the credentials Secret.
const (
	EnvAccessKeyID     = "AWS_ACCESS_KEY_ID"
	EnvSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	EnvSessionToken    = "AWS_SESSION_TOKEN"
)

// MaxPrefix bounds a key prefix: with the longest snapshot name after it
// the object key stays far below S3's 1024 bytes.
const MaxPrefix = 256

var (
	// bucketRE is S3's naming rule for new buckets: lowercase letters,
	// digits, '.' and '-', starting and ending with a letter or digit (the
	// length and ".." are checked apart).
	bucketRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`)
	regionRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	// dottedQuadRE is what S3 takes for an IP address in a bucket name:
	// four groups of digits, leading zeros included ("00.00.0.0"), which
	// net.ParseIP would not call an address.
	dottedQuadRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$`)
	// prefixRE is the alphabet of a prefix: object keys S3 and every
	// compatible server take as they are, without escaping.
	prefixRE = regexp.MustCompile(`^[A-Za-z0-9._/-]*$`)
)

// ValidateEndpoint accepts https://host[:port] or http://host[:port],
// spelled as Go's URL parser spells it back, and nothing more: a path
// would be taken for a bucket by path-style requests, and credentials
// belong in the environment, never in a URL (a value holding '@' is not
// repeated in the message: what stands before it may be a secret).
func ValidateEndpoint(s string) error {
	if s == "" {
		return errors.New("is required")
	}
	if strings.Contains(s, "@") {
		return errors.New("holds '@': no user information in the URL, the credentials come from a Secret or the environment")
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q is not a URL", s)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return fmt.Errorf("%q: the scheme must be https (or http for a store reached without TLS)", s)
	}
	if u.Opaque != "" || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || u.Path != "" || u.RawPath != "" {
		return fmt.Errorf("%q: only %s://host[:port], nothing after the host and port", s, u.Scheme)
	}
	if u.String() != s {
		return fmt.Errorf("%q: write it as %q", s, u.String())
	}
	if u.Hostname() == "" {
		return fmt.Errorf("%q: no host", s)
	}
	if strings.HasSuffix(u.Host, ":") {
		return fmt.Errorf("%q: empty port", s)
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q: port %q is not 1 to 65535", s, port)
		}
	}
	return nil
}

// ValidateBucket applies S3's bucket naming rules: 3 to 63 characters,
// lowercase letters, digits, '.' and '-', starting and ending with a letter
// or digit, no "..", no '-' beside a '.', and not an IP address.
func ValidateBucket(b string) error {
	switch {
	case len(b) < 3 || len(b) > 63:
		return fmt.Errorf("%q is %d bytes long, S3 bucket names have 3 to 63", b, len(b))
	case !bucketRE.MatchString(b):
		return fmt.Errorf("%q: use lowercase letters, digits, '.' and '-', starting and ending with a letter or digit", b)
	case strings.Contains(b, ".."):
		return fmt.Errorf("%q: two dots in a row", b)
	case strings.Contains(b, ".-") || strings.Contains(b, "-."):
		return fmt.Errorf("%q: a '-' next to a '.' (each label must start and end with a letter or digit)", b)
	case net.ParseIP(b) != nil || dottedQuadRE.MatchString(b):
		return fmt.Errorf("%q: a bucket name is not an IP address", b)
	}
	return nil
}

// ValidatePrefix accepts an empty prefix or a relative "folder" ending in
// '/' (no leading '/', no empty, "." or ".." segment), at most MaxPrefix
// bytes of letters, digits, '.', '_', '/' and '-'. Such a prefix names the
// same objects on every S3 server and in every tool that maps keys to
// paths, and a file-backed store cannot be led out of the bucket by it.
func ValidatePrefix(p string) error {
	if p == "" {
		return nil
	}
	switch {
	case len(p) > MaxPrefix:
		return fmt.Errorf("%q is %d bytes long, at most %d", p, len(p), MaxPrefix)
	case !prefixRE.MatchString(p):
		return fmt.Errorf("%q: use letters, digits, '.', '_', '-' and '/'", p)
	case !strings.HasSuffix(p, "/"):
		return fmt.Errorf("%q must end with '/' (the snapshot name follows it)", p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q must not start with '/'", p)
	}
	for _, seg := range strings.Split(strings.TrimSuffix(p, "/"), "/") {
		switch seg {
		case "":
			return fmt.Errorf("%q: empty segment (\"//\")", p)
		case ".", "..":
			return fmt.Errorf("%q: %q segment", p, seg)
		}
	}
	return nil
}

// ValidateRegion accepts empty (the client finds the region) or 1 to 64
// letters, digits, '.', '_' and '-'.
func ValidateRegion(r string) error {
	if r != "" && !regionRE.MatchString(r) {
		return fmt.Errorf("%q: use letters, digits, '.', '_' and '-', at most 64", r)
	}
	return nil
}

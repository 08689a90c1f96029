package etcdsnapshot

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// The environment variables the S3 credentials come from, and only from:
// never a flag, which the pod spec, ps and the CronJob's object would show.
const (
	EnvAccessKeyID     = "AWS_ACCESS_KEY_ID"
	EnvSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	EnvSessionToken    = "AWS_SESSION_TOKEN"
)

// MaxS3PrefixLen bounds --s3-prefix. With the longest --prefix the object
// key stays far below S3's 1024 bytes.
const MaxS3PrefixLen = 256

// S3Options are the --s3-* flags of `kubefarm-etcd snapshot` and the
// credentials from the environment. The zero value uploads nothing.
type S3Options struct {
	// Endpoint is https://host[:port] or http://host[:port].
	Endpoint string
	// Bucket is the bucket's name; setting it turns the upload on.
	Bucket string
	// Prefix starts every object key: empty, or ending in '/'.
	Prefix string
	// Region is the bucket's region; empty leaves it to the client.
	Region string
	// CAFile is a PEM bundle the endpoint's certificate is checked
	// against instead of the system roots (https only).
	CAFile string
	// Credentials are read from EnvAccessKeyID, EnvSecretAccessKey and
	// EnvSessionToken.
	Credentials S3Credentials
}

// S3Credentials are static S3 credentials. They print as "[redacted]" in
// any format, so that a struct logged or formatted by mistake holds none of
// them.
type S3Credentials struct {
	AccessKeyID, SecretAccessKey, SessionToken string
}

// String hides the credentials.
func (S3Credentials) String() string { return "[redacted]" }

// GoString hides the credentials from %#v.
func (S3Credentials) GoString() string { return "[redacted]" }

// Format hides the credentials from every verb.
func (S3Credentials) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte("[redacted]")) }

// Enabled says the snapshot is uploaded.
func (o S3Options) Enabled() bool { return o.Bucket != "" }

// Key is the object key of the snapshot named name.
func (o S3Options) Key(name string) string { return o.Prefix + name }

// Validate checks the --s3-* flags and the credentials' presence (never
// their values, which no error contains).
func (o S3Options) Validate() error {
	if o.Bucket == "" {
		var errs []error
		for _, f := range []struct{ flag, v string }{
			{"--s3-endpoint", o.Endpoint}, {"--s3-prefix", o.Prefix}, {"--s3-region", o.Region}, {"--s3-ca-file", o.CAFile},
		} {
			if f.v != "" {
				errs = append(errs, fmt.Errorf("%s is set without --s3-bucket", f.flag))
			}
		}
		return errors.Join(errs...)
	}
	var errs []error
	if err := ValidateS3Bucket(o.Bucket); err != nil {
		errs = append(errs, err)
	}
	if o.Endpoint == "" {
		errs = append(errs, errors.New("--s3-endpoint is required with --s3-bucket"))
	} else if strings.Contains(o.Endpoint, "@") {
		// Not quoted: what stands before the '@' may be a credential.
		errs = append(errs, fmt.Errorf("--s3-endpoint holds '@': no user information in the URL, credentials come only from $%s and $%s",
			EnvAccessKeyID, EnvSecretAccessKey))
	} else if err := checkS3Endpoint(o.Endpoint); err != nil {
		errs = append(errs, fmt.Errorf("--s3-endpoint: %w", err))
	} else if o.CAFile != "" && strings.HasPrefix(o.Endpoint, "http://") {
		errs = append(errs, fmt.Errorf("--s3-ca-file is set but --s3-endpoint %s is not https", o.Endpoint))
	}
	if err := ValidateS3Prefix(o.Prefix); err != nil {
		errs = append(errs, err)
	}
	if o.Region != "" && !s3RegionRE.MatchString(o.Region) {
		errs = append(errs, fmt.Errorf("--s3-region %q: use letters, digits, '.', '_' and '-', at most 64", o.Region))
	}
	if o.Credentials.AccessKeyID == "" {
		errs = append(errs, fmt.Errorf("$%s is required with --s3-bucket (credentials come from the environment only)", EnvAccessKeyID))
	}
	if o.Credentials.SecretAccessKey == "" {
		errs = append(errs, fmt.Errorf("$%s is required with --s3-bucket (credentials come from the environment only)", EnvSecretAccessKey))
	}
	return errors.Join(errs...)
}

var (
	// s3BucketRE is S3's naming rule for new buckets: 3 to 63 lowercase
	// letters, digits, '.' and '-', starting and ending with a letter or
	// digit (the length and ".." are checked apart).
	s3BucketRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`)
	s3RegionRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	// s3PrefixRE is the alphabet of --s3-prefix: object keys S3 and every
	// compatible server take as they are, without escaping.
	s3PrefixRE = regexp.MustCompile(`^[A-Za-z0-9._/-]*$`)
)

// ValidateS3Bucket checks a --s3-bucket value against S3's bucket naming
// rules.
func ValidateS3Bucket(b string) error {
	switch {
	case len(b) < 3 || len(b) > 63:
		return fmt.Errorf("--s3-bucket %q is %d bytes long, S3 bucket names have 3 to 63", b, len(b))
	case !s3BucketRE.MatchString(b):
		return fmt.Errorf("--s3-bucket %q: use lowercase letters, digits, '.' and '-', starting and ending with a letter or digit", b)
	case strings.Contains(b, ".."):
		return fmt.Errorf("--s3-bucket %q: two dots in a row", b)
	case net.ParseIP(b) != nil:
		return fmt.Errorf("--s3-bucket %q: a bucket name is not an IP address", b)
	}
	return nil
}

// ValidateS3Prefix checks a --s3-prefix value: empty, or a relative "folder"
// ending in '/' (no leading '/', no empty, "." or ".." segment), at most
// MaxS3PrefixLen bytes of letters, digits, '.', '_', '/' and '-'. Such a
// prefix names the same objects on every S3 server and in every tool that
// maps keys to paths.
func ValidateS3Prefix(p string) error {
	if p == "" {
		return nil
	}
	switch {
	case len(p) > MaxS3PrefixLen:
		return fmt.Errorf("--s3-prefix %q is %d bytes long, at most %d", p, len(p), MaxS3PrefixLen)
	case !s3PrefixRE.MatchString(p):
		return fmt.Errorf("--s3-prefix %q: use letters, digits, '.', '_', '-' and '/'", p)
	case !strings.HasSuffix(p, "/"):
		return fmt.Errorf("--s3-prefix %q must end with '/' (the snapshot name follows it)", p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("--s3-prefix %q must not start with '/'", p)
	}
	for _, seg := range strings.Split(strings.TrimSuffix(p, "/"), "/") {
		switch seg {
		case "":
			return fmt.Errorf("--s3-prefix %q: empty segment (\"//\")", p)
		case ".", "..":
			return fmt.Errorf("--s3-prefix %q: %q segment", p, seg)
		}
	}
	return nil
}

// checkS3Endpoint accepts http(s)://host[:port] and nothing else, as
// checkURL does, but with the port optional (S3 services listen on 443).
func checkS3Endpoint(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return fmt.Errorf("%q: scheme must be https or http", s)
	}
	if u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || u.Path != "" || u.RawPath != "" {
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

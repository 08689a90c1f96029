package etcdsnapshot

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kubefarm/kubefarm/internal/s3target"
)

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
	// Credentials are read from s3target.EnvAccessKeyID,
	// EnvSecretAccessKey and EnvSessionToken.
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
	for _, f := range []struct {
		flag, value string
		check       func(string) error
	}{
		{"--s3-bucket", o.Bucket, s3target.ValidateBucket},
		{"--s3-endpoint", o.Endpoint, s3target.ValidateEndpoint},
		{"--s3-prefix", o.Prefix, s3target.ValidatePrefix},
		{"--s3-region", o.Region, s3target.ValidateRegion},
	} {
		if err := f.check(f.value); err != nil {
			errs = append(errs, fmt.Errorf("%s %w", f.flag, err))
		}
	}
	if o.CAFile != "" && strings.HasPrefix(o.Endpoint, "http://") {
		errs = append(errs, fmt.Errorf("--s3-ca-file is set but --s3-endpoint %s is not https", o.Endpoint))
	}
	if o.Credentials.AccessKeyID == "" {
		errs = append(errs, fmt.Errorf("$%s is required with --s3-bucket (credentials come from the environment only)", s3target.EnvAccessKeyID))
	}
	if o.Credentials.SecretAccessKey == "" {
		errs = append(errs, fmt.Errorf("$%s is required with --s3-bucket (credentials come from the environment only)", s3target.EnvSecretAccessKey))
	}
	return errors.Join(errs...)
}

package etcdsnapshot

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kubefarm/kubefarm/internal/s3target"
)

// Known credential values, which no validation error may contain.
const (
	testAccessKey = "AKIATESTKEYID0000000"
	testSecret    = "s3cr3t-Value-that-must-never-print"
	testToken     = "session-token-that-must-never-print"
)

func validS3() S3Options {
	return S3Options{
		Endpoint: "https://s3.example.com", Bucket: "etcd-backups", Prefix: "tenants/", Region: "eu-west-1", CAFile: "ca.pem",
		Credentials: S3Credentials{AccessKeyID: testAccessKey, SecretAccessKey: testSecret, SessionToken: testToken},
	}
}

// TestS3OptionsValidate: each bad value is refused with an error that names
// its flag (or environment variable), and no error holds a credential.
func TestS3OptionsValidate(t *testing.T) {
	cases := []struct {
		name    string
		edit    func(*S3Options)
		wantErr []string
	}{
		{name: "valid", edit: func(*S3Options) {}},
		{name: "off", edit: func(o *S3Options) { *o = S3Options{} }},
		{name: "off, credentials in the environment", edit: func(o *S3Options) { *o = S3Options{Credentials: o.Credentials} }},
		{name: "http endpoint with a port", edit: func(o *S3Options) { o.Endpoint, o.CAFile = "http://10.0.0.1:9000", "" }},
		{name: "https endpoint with a port", edit: func(o *S3Options) { o.Endpoint = "https://minio.minio.svc:9000" }},
		{name: "IPv6 endpoint", edit: func(o *S3Options) { o.Endpoint = "https://[fd00::1]:9000" }},
		{name: "no prefix, region or CA", edit: func(o *S3Options) { o.Prefix, o.Region, o.CAFile = "", "", "" }},
		{name: "no session token", edit: func(o *S3Options) { o.Credentials.SessionToken = "" }},
		{name: "bucket with dots", edit: func(o *S3Options) { o.Bucket = "backups.example.com" }},

		{name: "endpoint without bucket", edit: func(o *S3Options) { o.Bucket = "" },
			wantErr: []string{"--s3-endpoint is set without --s3-bucket", "--s3-prefix is set without --s3-bucket",
				"--s3-region is set without --s3-bucket", "--s3-ca-file is set without --s3-bucket"}},
		{name: "no endpoint", edit: func(o *S3Options) { o.Endpoint = "" }, wantErr: []string{"--s3-endpoint is required"}},
		{name: "endpoint scheme", edit: func(o *S3Options) { o.Endpoint = "s3://bucket" }, wantErr: []string{"--s3-endpoint", "scheme must be https"}},
		{name: "endpoint without scheme", edit: func(o *S3Options) { o.Endpoint = "s3.example.com" }, wantErr: []string{"--s3-endpoint", "scheme"}},
		{name: "endpoint path", edit: func(o *S3Options) { o.Endpoint = "https://s3.example.com/bucket" }, wantErr: []string{"--s3-endpoint", "nothing after the host"}},
		{name: "endpoint slash", edit: func(o *S3Options) { o.Endpoint = "https://s3.example.com/" }, wantErr: []string{"--s3-endpoint", "nothing after the host"}},
		{name: "endpoint query", edit: func(o *S3Options) { o.Endpoint = "https://s3.example.com?a=b" }, wantErr: []string{"--s3-endpoint", "nothing after the host"}},
		{name: "endpoint user", edit: func(o *S3Options) { o.Endpoint = "https://" + testAccessKey + "@s3.example.com" },
			wantErr: []string{"--s3-endpoint holds '@'"}},
		{name: "endpoint user and secret", edit: func(o *S3Options) { o.Endpoint = "https://" + testAccessKey + ":" + testSecret + "@s3.example.com:bad" },
			wantErr: []string{"--s3-endpoint holds '@'"}},
		{name: "endpoint case", edit: func(o *S3Options) { o.Endpoint = "HTTPS://s3.example.com" }, wantErr: []string{"--s3-endpoint", "write it as"}},
		{name: "endpoint no host", edit: func(o *S3Options) { o.Endpoint = "https://:9000" }, wantErr: []string{"--s3-endpoint", "no host"}},
		{name: "endpoint empty port", edit: func(o *S3Options) { o.Endpoint = "https://s3.example.com:" }, wantErr: []string{"--s3-endpoint", "empty port"}},
		{name: "endpoint port 0", edit: func(o *S3Options) { o.Endpoint = "https://s3.example.com:0" }, wantErr: []string{"--s3-endpoint", "not 1 to 65535"}},
		{name: "endpoint port too big", edit: func(o *S3Options) { o.Endpoint = "https://s3.example.com:65536" }, wantErr: []string{"--s3-endpoint", "not 1 to 65535"}},
		{name: "CA with http", edit: func(o *S3Options) { o.Endpoint = "http://s3.example.com" }, wantErr: []string{"--s3-ca-file is set but --s3-endpoint"}},
		{name: "bucket too short", edit: func(o *S3Options) { o.Bucket = "ab" }, wantErr: []string{`--s3-bucket "ab"`, "3 to 63"}},
		{name: "bucket too long", edit: func(o *S3Options) { o.Bucket = strings.Repeat("a", 64) }, wantErr: []string{"--s3-bucket", "3 to 63"}},
		{name: "bucket uppercase", edit: func(o *S3Options) { o.Bucket = "Backups" }, wantErr: []string{"--s3-bucket", "lowercase"}},
		{name: "bucket underscore", edit: func(o *S3Options) { o.Bucket = "etcd_backups" }, wantErr: []string{"--s3-bucket", "lowercase"}},
		{name: "bucket leading hyphen", edit: func(o *S3Options) { o.Bucket = "-backups" }, wantErr: []string{"--s3-bucket", "starting and ending"}},
		{name: "bucket trailing dot", edit: func(o *S3Options) { o.Bucket = "backups." }, wantErr: []string{"--s3-bucket", "starting and ending"}},
		{name: "bucket dot dot", edit: func(o *S3Options) { o.Bucket = "back..ups" }, wantErr: []string{"--s3-bucket", "two dots"}},
		{name: "bucket slash", edit: func(o *S3Options) { o.Bucket = "back/ups" }, wantErr: []string{"--s3-bucket"}},
		{name: "bucket IP", edit: func(o *S3Options) { o.Bucket = "10.0.0.1" }, wantErr: []string{"--s3-bucket", "IP address"}},
		{name: "prefix without slash", edit: func(o *S3Options) { o.Prefix = "tenants" }, wantErr: []string{`--s3-prefix "tenants"`, "end with '/'"}},
		{name: "prefix leading slash", edit: func(o *S3Options) { o.Prefix = "/tenants/" }, wantErr: []string{"--s3-prefix", "start with '/'"}},
		{name: "prefix only slash", edit: func(o *S3Options) { o.Prefix = "/" }, wantErr: []string{"--s3-prefix", "start with '/'"}},
		{name: "prefix double slash", edit: func(o *S3Options) { o.Prefix = "a//b/" }, wantErr: []string{"--s3-prefix", "empty segment"}},
		{name: "prefix dot", edit: func(o *S3Options) { o.Prefix = "a/./b/" }, wantErr: []string{"--s3-prefix", `"." segment`}},
		{name: "prefix dot dot", edit: func(o *S3Options) { o.Prefix = "../b/" }, wantErr: []string{"--s3-prefix", `".." segment`}},
		{name: "prefix space", edit: func(o *S3Options) { o.Prefix = "a b/" }, wantErr: []string{"--s3-prefix", "use letters"}},
		{name: "prefix non-ASCII", edit: func(o *S3Options) { o.Prefix = "sauvegardes-été/" }, wantErr: []string{"--s3-prefix", "use letters"}},
		{name: "prefix too long", edit: func(o *S3Options) { o.Prefix = strings.Repeat("a", s3target.MaxPrefix) + "/" },
			wantErr: []string{"--s3-prefix", "at most 256"}},
		{name: "region", edit: func(o *S3Options) { o.Region = "eu west" }, wantErr: []string{`--s3-region "eu west"`}},
		{name: "no access key", edit: func(o *S3Options) { o.Credentials.AccessKeyID = "" },
			wantErr: []string{"$AWS_ACCESS_KEY_ID is required with --s3-bucket"}},
		{name: "no secret", edit: func(o *S3Options) { o.Credentials.SecretAccessKey = "" },
			wantErr: []string{"$AWS_SECRET_ACCESS_KEY is required with --s3-bucket"}},
		{name: "everything wrong", edit: func(o *S3Options) {
			*o = S3Options{Bucket: "B", Endpoint: "ftp://x", Prefix: "x", Region: "?"}
		}, wantErr: []string{"--s3-bucket", "--s3-endpoint", "--s3-prefix", "--s3-region", "$AWS_ACCESS_KEY_ID", "$AWS_SECRET_ACCESS_KEY"}},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			o := validS3()
			tt.edit(&o)
			err := o.Validate()
			// Through SnapshotOptions too, which is what the command calls.
			so := SnapshotOptions{
				Endpoints: []string{"https://127.0.0.1:2379"}, CACert: "ca.crt", Cert: "tls.crt", Key: "tls.key",
				DialTimeout: DefaultDialTimeout, Timeout: DefaultTimeout, Dir: DefaultDir, Prefix: "ns-name", Retain: DefaultRetain, S3: o,
			}
			serr := so.Validate()
			if len(tt.wantErr) == 0 {
				if err != nil || serr != nil {
					t.Fatalf("Validate() = %v; SnapshotOptions.Validate() = %v", err, serr)
				}
				return
			}
			if err == nil || serr == nil {
				t.Fatalf("Validate() = %v, SnapshotOptions.Validate() = %v; want %q", err, serr, tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) || !strings.Contains(serr.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
			for _, secret := range []string{testAccessKey, testSecret, testToken} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("Validate() = %q holds a credential", err)
				}
			}
		})
	}
}

// TestS3CredentialsNeverFormat: the options printed with any verb hold no
// credential, the redaction of errors replaces them all, and the key is
// the prefix and the name.
func TestS3CredentialsNeverFormat(t *testing.T) {
	o := validS3()
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		out := fmt.Sprintf(verb, o)
		for _, secret := range []string{testAccessKey, testSecret, testToken} {
			if strings.Contains(out, secret) || strings.Contains(out, fmt.Sprintf("%x", secret)) {
				t.Errorf("Sprintf(%q, options) = %s holds a credential", verb, out)
			}
		}
	}
	err := o.Credentials.redact(fmt.Errorf("server said: key %s, secret %s, token %s", testAccessKey, testSecret, testToken))
	if want := "server said: key [redacted], secret [redacted], token [redacted]"; err.Error() != want {
		t.Errorf("redact: %q, want %q", err, want)
	}
	if got := o.Key("ns-name-20260101T000000Z.db"); got != "tenants/ns-name-20260101T000000Z.db" {
		t.Errorf("Key = %q", got)
	}
}

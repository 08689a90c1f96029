package s3target

import (
	"path"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7/pkg/s3utils"
)

func TestValidateEndpoint(t *testing.T) {
	for _, tc := range []struct {
		in, wantErr string
	}{
		{"https://s3.example.com", ""},
		{"https://s3.example.com:9000", ""},
		{"http://minio.storage.svc:9000", ""},
		{"https://10.0.0.5:443/", "nothing after the host and port"},
		{"https://[fd00::1]:9000", ""},
		{"", "required"},
		{"s3.example.com", "scheme must be https"},
		{"ftp://s3.example.com", "scheme must be https"},
		{"https://key:secret@s3.example.com", "no user information"},
		{"https://s3.example.com/bucket", "nothing after the host and port"},
		{"https://s3.example.com?x=1", "nothing after the host and port"},
		{"https://s3.example.com#f", "nothing after the host and port"},
		{"https://:9000", "no host"},
		{"https://s3.example.com:0", "not 1 to 65535"},
		{"https://s3.example.com:99999", "not 1 to 65535"},
		{"https://s3.example.com:http", "not a URL"},
	} {
		err := ValidateEndpoint(tc.in)
		check(t, "ValidateEndpoint", tc.in, err, tc.wantErr)
	}
}

func TestValidateBucket(t *testing.T) {
	for _, tc := range []struct {
		in, wantErr string
	}{
		{"etcd-backups", ""},
		{"my.bucket.01", ""},
		{"abc", ""},
		{"ab", "3 to 63"},
		{strings.Repeat("a", 64), "3 to 63"},
		{"Backups", "use lowercase"},
		{"etcd_backups", "use lowercase"},
		{"-backups", "starting and ending"},
		{"backups.", "starting and ending"},
		{"a..b", "two dots"},
		{"192.168.1.1", "IP address"},
		{"00.00.0.0", "IP address"},
		{"a.-b", "next to a '.'"},
		{"a-.b", "next to a '.'"},
		{"1.2.3.4.5", ""},
	} {
		check(t, "ValidateBucket", tc.in, ValidateBucket(tc.in), tc.wantErr)
	}
}

func TestValidatePrefix(t *testing.T) {
	for _, tc := range []struct {
		in, wantErr string
	}{
		{"", ""},
		{"tenants/", ""},
		{"prod/Team_A/tenant-a/", ""},
		{"v1.2/", ""},
		{"tenants", "end with '/'"},
		{"/tenants/", "start with '/'"},
		{"a//b/", "empty"},
		{"a/./b/", `"."`},
		{"a/../b/", `".."`},
		{"../", `".."`},
		{"a b/", "use letters"},
		{"ä/", "use letters"},
		{"a\x00/", "use letters"},
		{strings.Repeat("a", MaxPrefix) + "/", "at most 256"},
	} {
		check(t, "ValidatePrefix", tc.in, ValidatePrefix(tc.in), tc.wantErr)
	}
}

func check(t *testing.T, fn, in string, err error, wantErr string) {
	t.Helper()
	switch {
	case wantErr == "" && err != nil:
		t.Errorf("%s(%q) = %v, want nil", fn, in, err)
	case wantErr != "" && err == nil:
		t.Errorf("%s(%q) = nil, want an error with %q", fn, in, wantErr)
	case wantErr != "" && !strings.Contains(err.Error(), wantErr):
		t.Errorf("%s(%q) = %v, want an error with %q", fn, in, err, wantErr)
	}
}

// FuzzValidatePrefix: whatever ValidatePrefix accepts is already in
// its clean form as a path (no empty, "." or ".." segment, relative, a
// trailing '/'), so the keys it starts read the same to every server and
// to every tool that maps keys to files.
func FuzzValidatePrefix(f *testing.F) {
	for _, s := range []string{"", "/", "a/", "a/b/", "a//", "./", "a/../", "/a/", "a", "a/.b/", "..a/", "a\x00/", "é/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if ValidatePrefix(p) != nil {
			return
		}
		if p == "" {
			return
		}
		if len(p) > MaxPrefix || !strings.HasSuffix(p, "/") || path.Clean("/"+p)+"/" != "/"+p {
			t.Fatalf("ValidatePrefix(%q) accepted a prefix that is not a clean relative folder", p)
		}
		if err := s3utils.CheckValidObjectName(p + "ns-name-20260101T000000Z.db"); err != nil {
			t.Fatalf("ValidatePrefix(%q) accepted it; minio-go refuses the key: %v", p, err)
		}
	})
}

// FuzzValidateBucket: whatever ValidateBucket accepts, minio-go's
// strict bucket name check accepts too.
func FuzzValidateBucket(f *testing.F) {
	for _, s := range []string{"etcd-backups", "a.b.c", "ab", "a..b", "10.0.0.1", "-ab", "ab-", "Ab1", "a_b", strings.Repeat("a", 63)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b string) {
		if ValidateBucket(b) != nil {
			return
		}
		if err := s3utils.CheckValidBucketNameStrict(b); err != nil {
			t.Fatalf("ValidateBucket(%q) accepted it; minio-go refuses it: %v", b, err)
		}
	})
}

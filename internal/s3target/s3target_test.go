package s3target

import (
	"strings"
	"testing"
)

func TestValidateEndpoint(t *testing.T) {
	for _, tc := range []struct {
		in, wantErr string
	}{
		{"https://s3.example.com", ""},
		{"https://s3.example.com:9000", ""},
		{"http://minio.storage.svc:9000", ""},
		{"https://10.0.0.5:443/", ""},
		{"https://[fd00::1]:9000", ""},
		{"", "required"},
		{"s3.example.com", "https://"},
		{"ftp://s3.example.com", "https://"},
		{"https://key:secret@s3.example.com", "credentials"},
		{"https://s3.example.com/bucket", "nothing after the port"},
		{"https://s3.example.com?x=1", "nothing after the port"},
		{"https://s3.example.com#f", "nothing after the port"},
		{"https://:9000", "no host"},
		{"https://s3.example.com:0", "1 to 65535"},
		{"https://s3.example.com:99999", "1 to 65535"},
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
		{"Backups", "lowercase"},
		{"etcd_backups", "lowercase"},
		{"-backups", "start and end"},
		{"backups.", "start and end"},
		{"a..b", `".."`},
		{"192.168.1.1", "IP address"},
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
		{"a b/", "only letters"},
		{"ä/", "only letters"},
		{"a\x00/", "only letters"},
		{strings.Repeat("a", MaxPrefix) + "/", "at most"},
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

// FuzzValidatePrefix: whatever is accepted is a key prefix no store can
// take out of the bucket or read two ways.
func FuzzValidatePrefix(f *testing.F) {
	for _, s := range []string{"", "a/", "a/b/", "../", "a//", "/a/", "a/./", strings.Repeat("x/", 200)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidatePrefix(s) != nil {
			return
		}
		if s == "" {
			return
		}
		if len(s) > MaxPrefix || !strings.HasSuffix(s, "/") || strings.HasPrefix(s, "/") || strings.Contains(s, "//") {
			t.Fatalf("accepted %q", s)
		}
		for _, seg := range strings.Split(strings.TrimSuffix(s, "/"), "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("accepted %q with segment %q", s, seg)
			}
		}
	})
}

// FuzzValidateEndpoint: whatever is accepted is scheme://host[:port].
func FuzzValidateEndpoint(f *testing.F) {
	for _, s := range []string{"https://a", "http://a:1", "https://a/b", "https://u@a", "https://[::1]:9000", "https://a:0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidateEndpoint(s) != nil {
			return
		}
		if !strings.HasPrefix(s, "https://") && !strings.HasPrefix(s, "http://") {
			t.Fatalf("accepted %q", s)
		}
		if strings.ContainsAny(s, "@?#") {
			t.Fatalf("accepted %q", s)
		}
	})
}

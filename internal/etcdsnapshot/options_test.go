package etcdsnapshot

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseEndpoints(t *testing.T) {
	cases := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: "https://10.0.0.1:2379", want: []string{"https://10.0.0.1:2379"}},
		{in: "https://a.b.svc:2379, https://c.d.svc:2379", want: []string{"https://a.b.svc:2379", "https://c.d.svc:2379"}},
		{in: "https://[fd00::1]:2379", want: []string{"https://[fd00::1]:2379"}},
		{in: "", wantErr: "required"},
		{in: "http://10.0.0.1:2379", wantErr: "scheme must be https"},
		{in: "10.0.0.1:2379", wantErr: `"10.0.0.1:2379": parse`},
		{in: "etcd:2379", wantErr: "scheme must be https"},
		{in: "HTTPS://etcd:2379", wantErr: `write it as "https://etcd:2379"`},
		{in: "https://10.0.0.1", wantErr: "host:port"},
		{in: "https://10.0.0.1:2379/v3", wantErr: "nothing after the port"},
		{in: "https://10.0.0.1:2379/", wantErr: "nothing after the port"},
		{in: "https://u:p@10.0.0.1:2379", wantErr: "nothing after the port"},
		{in: "https://10.0.0.1:2379?x=1", wantErr: "nothing after the port"},
		{in: "https://10.0.0.1:0", wantErr: "port"},
		{in: "https://10.0.0.1:99999", wantErr: "port"},
		{in: "https://:2379", wantErr: "no host"},
		{in: "https://a:2379,", wantErr: "empty URL"},
		{in: "https://a:2379,https://a:2379", wantErr: "twice"},
	}
	for _, tt := range cases {
		got, err := ParseEndpoints(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseEndpoints(%q) = %v, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseEndpoints(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestSnapshotOptionsValidate(t *testing.T) {
	valid := func() SnapshotOptions {
		return SnapshotOptions{
			Endpoints: []string{"https://127.0.0.1:2379"}, CACert: "ca.crt", Cert: "tls.crt", Key: "tls.key",
			DialTimeout: DefaultDialTimeout, Timeout: DefaultTimeout, Dir: DefaultDir, Prefix: "ns-name", Retain: DefaultRetain,
		}
	}
	cases := []struct {
		name    string
		edit    func(*SnapshotOptions)
		wantErr []string
	}{
		{name: "defaults", edit: func(*SnapshotOptions) {}},
		{name: "retain 1", edit: func(o *SnapshotOptions) { o.Retain = 1 }},
		{name: "retain 0", edit: func(o *SnapshotOptions) { o.Retain = 0 }, wantErr: []string{"--retain must be at least 1"}},
		{name: "no endpoints", edit: func(o *SnapshotOptions) { o.Endpoints = nil }, wantErr: []string{"--endpoints is required"}},
		{name: "no TLS files", edit: func(o *SnapshotOptions) { o.CACert, o.Cert, o.Key = "", "", "" },
			wantErr: []string{"--cacert is required", "--cert is required", "--key is required"}},
		{name: "timeouts", edit: func(o *SnapshotOptions) { o.DialTimeout, o.Timeout = 0, -time.Second },
			wantErr: []string{"--dial-timeout must be positive", "--timeout must be positive"}},
		{name: "no dir", edit: func(o *SnapshotOptions) { o.Dir = "" }, wantErr: []string{"--dir is required"}},
		{name: "no prefix", edit: func(o *SnapshotOptions) { o.Prefix = "" }, wantErr: []string{"--prefix is required"}},
		{name: "prefix with a slash", edit: func(o *SnapshotOptions) { o.Prefix = "ns/name" }, wantErr: []string{`--prefix "ns/name"`}},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			o := valid()
			tt.edit(&o)
			err := o.Validate()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestParseInitialCluster(t *testing.T) {
	cases := []struct {
		in      string
		want    []Member
		wantErr string
	}{
		{in: "m0=https://m0.svc:2380", want: []Member{{"m0", []string{"https://m0.svc:2380"}}}},
		{
			in: "m0=https://m0:2380,m1=https://m1:2380,m0=http://10.0.0.1:2380",
			want: []Member{
				{"m0", []string{"https://m0:2380", "http://10.0.0.1:2380"}},
				{"m1", []string{"https://m1:2380"}},
			},
		},
		{in: "", wantErr: "required"},
		{in: "m0", wantErr: "not name=peerURL"},
		{in: "=https://m0:2380", wantErr: "member name"},
		{in: "m 0=https://m0:2380", wantErr: "member name"},
		{in: "m%30=https://m0:2380", wantErr: "member name"},
		{in: "m0=https://m0:2380/", wantErr: "nothing after the port"},
		{in: "m0=https://m0", wantErr: "host:port"},
		{in: "m0=unix://m0:2380", wantErr: "scheme"},
		{in: "m0=https://m%30:2380", wantErr: "decode"},
		{in: "m0=https://m0:2380=x", wantErr: "decode"},
		{in: "m0=https://m0:2380,m1=https://m0:2380", wantErr: "given to m0 and m1"},
		{in: "m0=https://m0:2380,", wantErr: "not name=peerURL"},
	}
	for _, tt := range cases {
		got, err := ParseInitialCluster(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseInitialCluster(%q) = %v, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseInitialCluster(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestRestoreOptionsValidate(t *testing.T) {
	valid := func() RestoreOptions {
		return RestoreOptions{
			Snapshot: "/backup/s.db", DataDir: DefaultDataDir, Name: "m1",
			InitialCluster:    "m0=https://m0:2380,m1=https://m1:2380",
			AdvertisePeerURLs: []string{"https://m1:2380"}, Token: "ns-name",
		}
	}
	cases := []struct {
		name    string
		edit    func(*RestoreOptions)
		wantErr []string
	}{
		{name: "valid", edit: func(*RestoreOptions) {}},
		{name: "two advertised URLs in another order", edit: func(o *RestoreOptions) {
			o.InitialCluster = "m0=https://m0:2380,m1=https://m1:2380,m1=https://10.0.0.2:2380"
			o.AdvertisePeerURLs = []string{"https://10.0.0.2:2380", "https://m1:2380"}
		}},
		{name: "nothing set", edit: func(o *RestoreOptions) { *o = RestoreOptions{} }, wantErr: []string{
			"--snapshot is required", "--data-dir", "--name is required (default: $POD_NAME", "--initial-cluster-token is required",
			"--initial-advertise-peer-urls is required", "--initial-cluster is required",
		}},
		{name: "data dir /", edit: func(o *RestoreOptions) { o.DataDir = "/" }, wantErr: []string{`--data-dir "/"`}},
		{name: "not a member", edit: func(o *RestoreOptions) { o.Name = "m2" }, wantErr: []string{"--name m2 is not a member"}},
		{name: "advertised URL differs", edit: func(o *RestoreOptions) { o.AdvertisePeerURLs = []string{"https://m1.other:2380"} },
			wantErr: []string{"differ from m1's URLs"}},
		{name: "advertised URL missing", edit: func(o *RestoreOptions) {
			o.InitialCluster = "m0=https://m0:2380,m1=https://m1:2380,m1=https://10.0.0.2:2380"
		}, wantErr: []string{"differ from m1's URLs"}},
		{name: "bad advertised URL", edit: func(o *RestoreOptions) { o.AdvertisePeerURLs = []string{"m1:2380"} },
			wantErr: []string{"--initial-advertise-peer-urls"}},
		{name: "from a bucket", edit: func(o *RestoreOptions) { *o = fromBucket(*o) }},
		{name: "from a bucket, a path as the name", edit: func(o *RestoreOptions) { *o = fromBucket(*o); o.Snapshot = "t/s.db" },
			wantErr: []string{`--snapshot "t/s.db": with --s3-bucket`}},
		{name: "from a bucket, no download directory", edit: func(o *RestoreOptions) { *o = fromBucket(*o); o.FetchDir = "" },
			wantErr: []string{"--s3-bucket and --fetch-dir go together"}},
		{name: "from a bucket, no credentials", edit: func(o *RestoreOptions) { *o = fromBucket(*o); o.S3.Credentials = S3Credentials{} },
			wantErr: []string{"AWS_ACCESS_KEY_ID is required"}},
		{name: "a download directory without a bucket", edit: func(o *RestoreOptions) { o.FetchDir = "/restore" },
			wantErr: []string{"--s3-bucket and --fetch-dir go together"}},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			o := valid()
			tt.edit(&o)
			err := o.Validate()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// fromBucket is o restoring s.db from a bucket.
func fromBucket(o RestoreOptions) RestoreOptions {
	o.Snapshot, o.FetchDir = "s.db", "/restore"
	o.S3 = S3Options{Endpoint: "https://s3.example.com", Bucket: "backups", Prefix: "t/",
		Credentials: S3Credentials{AccessKeyID: "a", SecretAccessKey: "s"}}
	return o
}

func TestSplitList(t *testing.T) {
	if got := SplitList(" a, ,b ,"); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("SplitList = %q", got)
	}
	if got := SplitList(""); got != nil {
		t.Errorf("SplitList(\"\") = %q", got)
	}
}

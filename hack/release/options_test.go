package release

import (
	"strings"
	"testing"
	"time"
)

func TestOptionsValidate(t *testing.T) {
	good := Options{Version: "1.2.3", ImageRepo: "ghcr.io/kubefarm", Arches: []string{"amd64", "arm64"}, Created: time.Unix(1, 0),
		IPXEARM64: "bin/ipxe/ipxe-arm64.efi"}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Options)
		want   string
	}{
		{"leading v", func(o *Options) { o.Version = "v1.2.3" }, `version "v1.2.3"`},
		{"two parts", func(o *Options) { o.Version = "1.2" }, `version "1.2"`},
		{"leading zero", func(o *Options) { o.Version = "1.02.3" }, `version "1.02.3"`},
		{"no registry", func(o *Options) { o.ImageRepo = "" }, "image repository"},
		{"upper case repository", func(o *Options) { o.ImageRepo = "ghcr.io/KubeFarm" }, "image repository"},
		{"bad chart repository", func(o *Options) { o.ChartRepo = "ghcr.io/a b" }, "chart repository"},
		{"no arches", func(o *Options) { o.Arches = nil }, "no architectures"},
		{"riscv", func(o *Options) { o.Arches = []string{"riscv64"} }, `architecture "riscv64"`},
		{"no source date", func(o *Options) { o.Created = time.Time{} }, "source date"},
		{"no arm64 iPXE", func(o *Options) { o.IPXEARM64 = "" }, "make ipxe-arm64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.mutate(&o)
			err := o.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
	if pre := (Options{Version: "1.2.3-rc.1", ImageRepo: "r.example/k", Arches: []string{"arm64"}, Created: time.Unix(1, 0), IPXEARM64: "x.efi"}); pre.Validate() != nil {
		t.Errorf("a pre-release version is refused: %v", pre.Validate())
	}
}

func TestIsLoopback(t *testing.T) {
	for repo, want := range map[string]bool{
		"127.0.0.1:5001/charts": true, "localhost:5000/x": true, "[::1]:5000/x": true,
		"ghcr.io/kubefarm/charts": false, "10.0.0.1:5000/x": false, "localhost.example.com/x": false,
	} {
		if got := isLoopback(repo); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", repo, got, want)
		}
	}
}

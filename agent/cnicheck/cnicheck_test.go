package cnicheck

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	nodeimage "github.com/kubefarm/kubefarm/images/node"
	"github.com/kubefarm/kubefarm/images/node/cni"
)

// The image's conflist (images/node/rootfs/etc/cni/net.d/10-kubefarm.conflist).
const conflist = `{
  "cniVersion": "0.3.1",
  "name": "kubefarm",
  "plugins": [
    {"type": "flannel", "delegate": {"hairpinMode": true, "isDefaultGateway": true}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "bandwidth", "capabilities": {"bandwidth": true}}
  ]
}
`

// The same chain with a mesh plugin chained in at build time.
var meshConflist = strings.Replace(conflist, `{"type": "bandwidth", "capabilities": {"bandwidth": true}}`,
	`{"type": "bandwidth", "capabilities": {"bandwidth": true}},
    {"type": "istio-cni", "kubernetes": {"kubeconfig": "/etc/cni/net.d/istio.kubeconfig"}}`, 1)

func hexsum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// writeFile writes data at rel under root, making its folders.
func writeFile(t *testing.T, root, rel string, data []byte, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
}

// root builds a node root with the chain and returns it and what the
// image records of it.
func root(t *testing.T, conf string, extra ...string) (string, cni.Record) {
	t.Helper()
	r := t.TempDir()
	write := func(rel string, data []byte, mode os.FileMode) { writeFile(t, r, rel, data, mode) }
	want := cni.Record{Conflist: "/" + cni.ConflistPath, ConflistSHA256: hexsum([]byte(conf)), Plugins: map[string]string{}}
	write(cni.ConflistPath, []byte(conf), 0o644)
	for _, p := range cni.SetupPlugins {
		bin := []byte("#!/bin/true " + p + "\n")
		write(filepath.Join(cni.BinDir, p), bin, 0o755)
		want.Plugins[p] = hexsum(bin)
	}
	for _, p := range extra {
		write(filepath.Join(cni.BinDir, p), []byte("#!/bin/true "+p+"\n"), 0o755)
	}
	return r, want
}

func TestCheck(t *testing.T) {
	bin := func(r, p string) string { return filepath.Join(r, cni.BinDir, p) }
	netd := func(r, name string) string { return filepath.Join(r, "etc/cni/net.d", name) }
	for _, tc := range []struct {
		name   string
		conf   string
		extra  []string
		mut    func(t *testing.T, r string, want *cni.Record)
		ok     bool
		reason string // a part of the reason
	}{
		{name: "all good", conf: conflist, ok: true, reason: "bandwidth, bridge, flannel, host-local, loopback, portmap"},
		{name: "missing binary", conf: conflist, mut: func(t *testing.T, r string, _ *cni.Record) {
			os.Remove(bin(r, "portmap"))
		}, reason: "plugin portmap: /usr/lib/cni/portmap is missing"},
		{name: "missing delegate binary", conf: conflist, mut: func(t *testing.T, r string, _ *cni.Record) {
			os.Remove(bin(r, "bridge"))
		}, reason: "plugin bridge"},
		{name: "non-executable binary", conf: conflist, mut: func(t *testing.T, r string, _ *cni.Record) {
			os.Chmod(bin(r, "flannel"), 0o644)
		}, reason: "plugin flannel: /usr/lib/cni/flannel is not an executable file"},
		{name: "replaced binary", conf: conflist, mut: func(t *testing.T, r string, _ *cni.Record) {
			os.WriteFile(bin(r, "bandwidth"), []byte("evil"), 0o755)
		}, reason: "plugin bandwidth: /usr/lib/cni/bandwidth is not the binary the image records"},
		{name: "hash mismatch", conf: conflist, mut: func(t *testing.T, r string, _ *cni.Record) {
			os.WriteFile(filepath.Join(r, cni.ConflistPath), []byte(strings.Replace(conflist, "0.3.1", "1.0.0", 1)), 0o644)
		}, reason: "conflist /etc/cni/net.d/10-kubefarm.conflist has sha256"},
		{name: "missing conflist", conf: conflist, mut: func(t *testing.T, r string, _ *cni.Record) {
			os.Remove(filepath.Join(r, cni.ConflistPath))
		}, reason: "conflist /etc/cni/net.d/10-kubefarm.conflist"},
		{name: "foreign file sorting first", conf: conflist, mut: func(t *testing.T, r string, _ *cni.Record) {
			os.WriteFile(netd(r, "00-mesh.conflist"), []byte("{}"), 0o644)
		}, reason: "00-mesh.conflist in /etc/cni/net.d sorts before 10-kubefarm.conflist"},
		{name: "foreign file sorting after is harmless", conf: conflist, ok: true, mut: func(t *testing.T, r string, _ *cni.Record) {
			os.WriteFile(netd(r, "99-other.conf"), []byte("{}"), 0o644)
		}},
		{name: "chained extra plugin with its binary", conf: meshConflist, extra: []string{"istio-cni"}, ok: true, reason: "istio-cni"},
		{name: "chained extra plugin without its binary", conf: meshConflist, reason: "plugin istio-cni: /usr/lib/cni/istio-cni is missing"},
		{name: "plugin type climbing out", conf: strings.Replace(conflist, `"portmap"`, `"../../bin/sh"`, 1), mut: func(t *testing.T, r string, want *cni.Record) {
			b, _ := os.ReadFile(filepath.Join(r, cni.ConflistPath))
			want.ConflistSHA256 = hexsum(b)
		}, reason: "which is no file name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, want := root(t, tc.conf, tc.extra...)
			if tc.mut != nil {
				tc.mut(t, r, &want)
			}
			v := Check(r, Default, want)
			if v.OK != tc.ok || !strings.Contains(v.Reason, tc.reason) {
				t.Errorf("verdict %+v, want ok=%v with %q", v, tc.ok, tc.reason)
			}
			if len(v.Reason) > 512 {
				t.Errorf("reason of %d bytes", len(v.Reason))
			}
		})
	}
}

func TestReadExpected(t *testing.T) {
	dir := t.TempDir()
	m := &nodeimage.Manifest{CNI: cni.Record{ConflistSHA256: strings.Repeat("a", 64), Plugins: map[string]string{"flannel": "b"}}}
	if err := nodeimage.WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	got, err := ReadExpected(filepath.Join(dir, nodeimage.ManifestFile))
	if err != nil || got.ConflistSHA256 != m.CNI.ConflistSHA256 || got.Plugins["flannel"] != "b" {
		t.Errorf("whole manifest: %+v, %v", got, err)
	}
	p := filepath.Join(dir, "cni.json")
	os.WriteFile(p, []byte(`{"cni":{"conflistSha256":"`+strings.Repeat("c", 64)+`"}}`), 0o644)
	if got, err := ReadExpected(p); err != nil || got.ConflistSHA256 != strings.Repeat("c", 64) {
		t.Errorf("cni only: %+v, %v", got, err)
	}
	os.WriteFile(p, []byte(`{"kubelet":{}}`), 0o644)
	if _, err := ReadExpected(p); err == nil {
		t.Error("a record without cni accepted")
	}
}

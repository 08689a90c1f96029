package cnicheck

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubefarm/kubefarm/images/node/cni"
)

// The mesh plugin's conflist entry, as images/node/README.md's example.
const istioEntry = `{
  "type": "istio-cni",
  "log_level": "info",
  "kubernetes": {
    "kubeconfig": "/etc/cni/net.d/ZZZ-istio-cni-kubeconfig",
    "cni_bin_dir": "/usr/lib/cni",
    "exclude_namespaces": ["kube-system"]
  }
}`

// TestChainedMeshPlugin is the whole story of chaining a service mesh's CNI
// plugin at image build time, without building an image: what build.sh does
// with CNI_CHAIN_DIR (install the binary, ChainPlugins onto the recipe's
// conflist, the cni-record of cni.FromRoot), then the agent's boot check on
// that root. The chained image passes; the failures the design is there to
// catch, a mesh installer that writes its own conflist sorting first (the
// race that leaves pods without the mesh's rules) or a chained plugin's
// binary gone or changed, fail with a reason naming the file or plugin.
func TestChainedMeshPlugin(t *testing.T) {
	recipe, err := os.ReadFile(filepath.Join("../../images/node/rootfs", cni.ConflistPath))
	if err != nil {
		t.Fatal(err)
	}
	netd := filepath.Dir(cni.ConflistPath)

	// build builds the image's root as build.sh does and returns it with
	// the record the image carries (read back as the agent reads it).
	build := func(t *testing.T) (string, cni.Record) {
		t.Helper()
		r := t.TempDir()
		write := func(rel string, data []byte, mode os.FileMode) { writeFile(t, r, rel, data, mode) }
		for _, p := range cni.SetupPlugins {
			write(filepath.Join(cni.BinDir, p), []byte("#!/bin/true "+p+"\n"), 0o755)
		}
		// CNI_CHAIN_DIR/istio-cni/{plugin,entry.json}
		write(filepath.Join(cni.BinDir, "istio-cni"), []byte("#!/bin/true istio-cni\n"), 0o755)
		conf, err := cni.ChainPlugins(recipe, []byte(istioEntry))
		if err != nil {
			t.Fatal(err)
		}
		write(cni.ConflistPath, conf, 0o644)
		// nodeimage cni-record
		rec, err := cni.FromRoot(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(map[string]any{"cni": rec})
		write("usr/share/kubefarm/cni.json", b, 0o644)
		want, err := ReadExpected(filepath.Join(r, "usr/share/kubefarm/cni.json"))
		if err != nil {
			t.Fatal(err)
		}
		if want.Plugins["istio-cni"] == "" {
			t.Fatalf("the record has no istio-cni: %v", want.Plugins)
		}
		return r, want
	}

	bin := func(r, p string) string { return filepath.Join(r, cni.BinDir, p) }
	for _, tc := range []struct {
		name   string
		mut    func(t *testing.T, r string)
		ok     bool
		reason string // a part of the reason
	}{
		{name: "chained at build time", ok: true, reason: "bandwidth, bridge, flannel, host-local, istio-cni, loopback, portmap present"},
		{name: "mesh files sorting after the conflist are harmless", ok: true, mut: func(t *testing.T, r string) {
			os.WriteFile(filepath.Join(r, netd, "ZZZ-istio-cni-kubeconfig"), []byte("apiVersion: v1\n"), 0o600)
		}},
		{name: "mesh installer races in its own conflist", mut: func(t *testing.T, r string) {
			// What a mesh's node agent writes when it installs its own
			// configuration instead of being chained: its plugin alone (or
			// a copy of a chain) in a file containerd loads first.
			os.WriteFile(filepath.Join(r, netd, "00-istio-cni.conflist"), []byte(`{"cniVersion":"0.3.1","name":"istio","plugins":[{"type":"istio-cni"}]}`), 0o644)
		}, reason: "00-istio-cni.conflist in /etc/cni/net.d sorts before 10-kubefarm.conflist and would replace the chain"},
		{name: "mesh installer rewrites the chain in place", mut: func(t *testing.T, r string) {
			b, _ := os.ReadFile(filepath.Join(r, cni.ConflistPath))
			os.WriteFile(filepath.Join(r, cni.ConflistPath), []byte(strings.Replace(string(b), `"info"`, `"debug"`, 1)), 0o644)
		}, reason: "conflist /etc/cni/net.d/10-kubefarm.conflist has sha256"},
		{name: "chained plugin's binary missing", mut: func(t *testing.T, r string) {
			os.Remove(bin(r, "istio-cni"))
		}, reason: "plugin istio-cni: /usr/lib/cni/istio-cni is missing"},
		{name: "chained plugin's binary replaced", mut: func(t *testing.T, r string) {
			os.WriteFile(bin(r, "istio-cni"), []byte("#!/bin/true newer istio-cni\n"), 0o755)
		}, reason: "plugin istio-cni: /usr/lib/cni/istio-cni is not the binary the image records"},
		{name: "chained plugin's binary not executable", mut: func(t *testing.T, r string) {
			os.Chmod(bin(r, "istio-cni"), 0o644)
		}, reason: "plugin istio-cni: /usr/lib/cni/istio-cni is not an executable file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, want := build(t)
			if tc.mut != nil {
				tc.mut(t, r)
			}
			v := Check(r, Default, want)
			if v.OK != tc.ok || !strings.Contains(v.Reason, tc.reason) {
				t.Errorf("verdict %+v, want ok=%v with %q", v, tc.ok, tc.reason)
			}
		})
	}

	// The same root checked against the record of the unchained image (an
	// image built without CNI_CHAIN_DIR) fails: the record pins the chain.
	t.Run("record of the unchained image", func(t *testing.T) {
		r, _ := build(t)
		plain := t.TempDir()
		os.MkdirAll(filepath.Join(plain, netd), 0o755)
		os.WriteFile(filepath.Join(plain, cni.ConflistPath), recipe, 0o644)
		os.MkdirAll(filepath.Join(plain, cni.BinDir), 0o755)
		for _, p := range cni.SetupPlugins {
			os.WriteFile(bin(plain, p), []byte("#!/bin/true "+p+"\n"), 0o755)
		}
		rec, err := cni.FromRoot(plain)
		if err != nil {
			t.Fatal(err)
		}
		if v := Check(r, Default, rec); v.OK || !strings.Contains(v.Reason, "10-kubefarm.conflist has sha256") {
			t.Errorf("verdict %+v", v)
		}
	})
}

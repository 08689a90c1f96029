package cni_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubefarm/kubefarm/images/node/cni"
)

// A service mesh's CNI plugin entry, keys in a non-sorted order.
const meshEntry = `{"type": "istio-cni", "log_level": "info", "kubernetes": {"kubeconfig": "/etc/cni/net.d/ZZZ-istio-cni-kubeconfig", "cni_bin_dir": "/usr/lib/cni"}}`

func recipeConflist(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../rootfs", cni.ConflistPath))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func chainTypesOf(t *testing.T, conf []byte) []string {
	t.Helper()
	var c struct {
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(conf, &c); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range c.Plugins {
		out = append(out, p.Type)
	}
	return out
}

func TestChainPlugins(t *testing.T) {
	recipe := recipeConflist(t)

	// No entries: the image's conflist comes back byte for byte.
	same, err := cni.ChainPlugins(recipe)
	if err != nil || !bytes.Equal(same, recipe) {
		t.Fatalf("no entries changed the conflist (%v):\n%s", err, same)
	}

	// Appended in order, keys of an entry in their order, deterministic.
	a, err := cni.ChainPlugins(recipe, []byte(meshEntry), []byte(`{"type":"tuning","sysctl":{"net.core.somaxconn":"500"}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := cni.ChainPlugins(recipe, []byte(meshEntry), []byte(`{"type":"tuning","sysctl":{"net.core.somaxconn":"500"}}`))
	if !bytes.Equal(a, b) {
		t.Error("same input, different bytes")
	}
	if got := strings.Join(chainTypesOf(t, a), ","); got != "flannel,portmap,bandwidth,istio-cni,tuning" {
		t.Errorf("chain %s", got)
	}
	if !bytes.Contains(a, []byte(`      "type": "istio-cni",
      "log_level": "info",
      "kubernetes": {
        "kubeconfig": "/etc/cni/net.d/ZZZ-istio-cni-kubeconfig",`)) || !bytes.HasSuffix(a, []byte("}\n")) {
		t.Errorf("not 2-space indented with the entry's key order and a trailing newline:\n%s", a)
	}
	if !bytes.HasPrefix(a, []byte("{\n  \"cniVersion\": \"0.3.1\",\n  \"name\": \"kubefarm\",\n")) {
		t.Errorf("the conflist's own keys moved:\n%s", a)
	}
	// Chaining onto a chained conflist is chaining both at once.
	step, err := cni.ChainPlugins(recipe, []byte(meshEntry))
	if err != nil {
		t.Fatal(err)
	}
	if two, err := cni.ChainPlugins(step, []byte(`{"type":"tuning","sysctl":{"net.core.somaxconn":"500"}}`)); err != nil || !bytes.Equal(two, a) {
		t.Errorf("two steps differ from one (%v):\n%s", err, two)
	}

	for _, tc := range []struct {
		name     string
		conflist string
		entries  []string
		err      string
	}{
		{name: "climbing type", entries: []string{`{"type":"../x"}`}, err: `"../x" is not a plain file name`},
		{name: "type with a slash", entries: []string{`{"type":"a/b"}`}, err: `"a/b" is not a plain file name`},
		{name: "empty type", entries: []string{`{"type":""}`}, err: `"" is not a plain file name`},
		{name: "dot dot", entries: []string{`{"type":".."}`}, err: `".." is not a plain file name`},
		{name: "no type", entries: []string{`{"name":"x"}`}, err: `no "type"`},
		{name: "type not a string", entries: []string{`{"type":7}`}, err: `"type" is not a string`},
		{name: "long type", entries: []string{`{"type":"` + strings.Repeat("a", 65) + `"}`}, err: "not a plain file name"},
		{name: "duplicate type", entries: []string{`{"type":"portmap"}`}, err: `entry 1: plugin type "portmap" is already in the chain`},
		{name: "duplicate among entries", entries: []string{meshEntry, meshEntry}, err: `entry 2: plugin type "istio-cni" is already in the chain`},
		{name: "array entry", entries: []string{`[{"type":"x"}]`}, err: "entry 1: not a JSON object"},
		{name: "string entry", entries: []string{`"istio-cni"`}, err: "entry 1: not a JSON object"},
		{name: "broken entry", entries: []string{`{"type":"x"`}, err: "entry 1"},
		{name: "trailing data", entries: []string{`{"type":"x"} {}`}, err: "data after the object"},
		{name: "duplicate key", entries: []string{`{"type":"x","type":"y"}`}, err: `key "type" appears twice`},
		{name: "big entry", entries: []string{`{"type":"x","pad":"` + strings.Repeat("a", 64<<10) + `"}`}, err: "more than 65536"},
		{name: "too many entries", entries: []string{`{"type":"a"}`, `{"type":"b"}`, `{"type":"c"}`, `{"type":"d"}`, `{"type":"e"}`, `{"type":"f"}`, `{"type":"g"}`, `{"type":"h"}`, `{"type":"i"}`}, err: "9 entries to chain, at most 8"},
		{name: "conflist without plugins", conflist: `{"cniVersion":"0.3.1","name":"x"}`, entries: []string{meshEntry}, err: `conflist: no "plugins" array`},
		{name: "conflist with empty plugins", conflist: `{"name":"x","plugins":[]}`, entries: []string{meshEntry}, err: "not a non-empty array"},
		{name: "conflist not JSON", conflist: `plugins`, entries: []string{meshEntry}, err: "conflist: not JSON"},
		{name: "conflist plugin without type", conflist: `{"plugins":[{"name":"x"}]}`, entries: []string{meshEntry}, err: `conflist: plugins[0]: no "type"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := recipe
			if tc.conflist != "" {
				conf = []byte(tc.conflist)
			}
			var entries [][]byte
			for _, e := range tc.entries {
				entries = append(entries, []byte(e))
			}
			out, err := cni.ChainPlugins(conf, entries...)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("got %v, want an error with %q", err, tc.err)
			}
			if out != nil {
				t.Errorf("output with an error")
			}
		})
	}
}

// TestFromRootChained: the record covers the plugins chained in, and
// only SetupPlugins without them.
func TestFromRootChained(t *testing.T) {
	recipe := recipeConflist(t)
	mk := func(conf []byte, extra ...string) string {
		r := t.TempDir()
		os.MkdirAll(filepath.Join(r, filepath.Dir(cni.ConflistPath)), 0o755)
		os.MkdirAll(filepath.Join(r, cni.BinDir), 0o755)
		os.WriteFile(filepath.Join(r, cni.ConflistPath), conf, 0o644)
		for _, p := range append(append([]string{}, cni.SetupPlugins...), extra...) {
			os.WriteFile(filepath.Join(r, cni.BinDir, p), []byte("bin "+p), 0o755)
		}
		return r
	}
	c, err := cni.FromRoot(mk(recipe))
	if err != nil || len(c.Plugins) != len(cni.SetupPlugins) {
		t.Fatalf("plain image: %v, %v", c.Plugins, err)
	}
	chained, err := cni.ChainPlugins(recipe, []byte(meshEntry))
	if err != nil {
		t.Fatal(err)
	}
	c2, err := cni.FromRoot(mk(chained, "istio-cni"))
	if err != nil || len(c2.Plugins) != len(cni.SetupPlugins)+1 || c2.Plugins["istio-cni"] == "" {
		t.Fatalf("chained image: %v, %v", c2.Plugins, err)
	}
	if c2.ChainSHA256 == c.ChainSHA256 || c2.ConflistSHA256 == c.ConflistSHA256 {
		t.Error("chaining a plugin did not change the record's hashes")
	}
	if got := strings.Join(c2.ConflistPlugins, ","); got != "flannel,portmap,bandwidth,istio-cni" {
		t.Errorf("chained image's conflist plugins %s", got)
	}
	if got := strings.Join(c.ConflistPlugins, ","); got != strings.Join(cni.ConflistPlugins, ",") {
		t.Errorf("plain image's conflist plugins %s, want the recipe's", got)
	}
	if !strings.Contains(cni.ChainText(c2.ConflistSHA256, c2.Plugins), "\nistio-cni ") {
		t.Error("chain text has no istio-cni line")
	}
	// A chained plugin without its binary: no record.
	if _, err := cni.FromRoot(mk(chained)); err == nil || !strings.Contains(err.Error(), "istio-cni") {
		t.Errorf("missing istio-cni binary: %v", err)
	}
	// A conflist naming a path: no record.
	bad := bytes.Replace(recipe, []byte(`"portmap"`), []byte(`"../../bin/sh"`), 1)
	if _, err := cni.FromRoot(mk(bad)); err == nil || !strings.Contains(err.Error(), "not a plain file name") {
		t.Errorf("climbing plugin type: %v", err)
	}
}

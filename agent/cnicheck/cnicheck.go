// Package cnicheck decides whether a node's CNI chain is the one its image
// was built with (ARCHITECTURE.md, boot step 4): every plugin binary the
// conflist names (and the chain plugins the image's manifest records) is in
// the CNI bin dir and executable, with the recorded sha256 where the
// manifest records one; the conflist has the sha256 the manifest records;
// and nothing in its folder sorts before it (containerd uses the first
// file, max_conf_num = 1, so a file sorting first would replace the chain).
//
// It is pure over a root directory, so tests use a temporary one; on the
// node the root is /.
package cnicheck

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kubefarm/kubefarm/images/node/cni"
)

// Verdict is the check's result; Reason is for people (it becomes the
// Machine's NetworkVerified message), at most a few hundred bytes.
type Verdict struct {
	OK     bool
	Reason string
}

// Layout says where the chain is under a root; Default is the node image's.
type Layout struct {
	Conflist string // relative to the root
	BinDir   string // relative to the root
}

// Default is the node image's layout (images/node/cni: ConflistPath, BinDir).
var Default = Layout{Conflist: cni.ConflistPath, BinDir: cni.BinDir}

// ReadExpected reads what the image records of its CNI chain: a JSON
// object with a "cni" member in the shape of the image manifest's
// (cni.Record), which the whole manifest.json also is.
func ReadExpected(file string) (cni.Record, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return cni.Record{}, fmt.Errorf("CNI record: %w", err)
	}
	var m struct {
		CNI *cni.Record `json:"cni"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return cni.Record{}, fmt.Errorf("CNI record %s: %w", file, err)
	}
	if m.CNI == nil || len(m.CNI.ConflistSHA256) != 64 {
		return cni.Record{}, fmt.Errorf("CNI record %s: cni.conflistSha256 is missing or not 64 hex digits", file)
	}
	return *m.CNI, nil
}

// Check checks the chain under root against want.
func Check(root string, l Layout, want cni.Record) Verdict {
	confDir, confName := path.Split(l.Conflist)
	fail := func(format string, a ...any) Verdict { return Verdict{Reason: fmt.Sprintf(format, a...)} }

	// Nothing sorts before the conflist: containerd would load it instead.
	entries, err := os.ReadDir(filepath.Join(root, confDir))
	if err != nil {
		return fail("cannot read %s: %v", "/"+confDir, err)
	}
	var first []string
	for _, e := range entries {
		if e.Name() < confName {
			first = append(first, e.Name())
		}
	}
	if len(first) > 0 {
		return fail("%s in /%s sorts before %s and would replace the chain", strings.Join(first, ", "), strings.TrimSuffix(confDir, "/"), confName)
	}

	conf := filepath.Join(root, l.Conflist)
	got, _, err := cni.FileSHA256(conf)
	if err != nil {
		return fail("conflist /%s: %v", l.Conflist, err)
	}
	if got != want.ConflistSHA256 {
		return fail("conflist /%s has sha256 %s, the image records %s", l.Conflist, got, want.ConflistSHA256)
	}
	b, err := os.ReadFile(conf)
	if err != nil || len(b) > cni.MaxConflistSize {
		return fail("conflist /%s: cannot read it whole", l.Conflist)
	}
	named, err := cni.ConflistTypes(b)
	if err != nil {
		return fail("conflist /%s: %v", l.Conflist, err)
	}

	// The plugins it names, and those the image records (what flannel
	// delegates to, loopback), each once, in order.
	set := map[string]bool{}
	for _, p := range named {
		set[p] = true
	}
	for p := range want.Plugins {
		set[p] = true
	}
	plugins := make([]string, 0, len(set))
	for p := range set {
		plugins = append(plugins, p)
	}
	sort.Strings(plugins)
	for _, p := range plugins {
		if cni.PluginName(p) != nil {
			return fail("conflist /%s names plugin type %q, which is no file name", l.Conflist, p)
		}
		bin := filepath.Join(root, l.BinDir, p)
		fi, err := os.Stat(bin)
		if err != nil {
			return fail("plugin %s: /%s/%s is missing", p, l.BinDir, p)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return fail("plugin %s: /%s/%s is not an executable file (mode %s)", p, l.BinDir, p, fi.Mode())
		}
		if sum, ok := want.Plugins[p]; ok {
			got, _, err := cni.FileSHA256(bin)
			if err != nil || got != sum {
				return fail("plugin %s: /%s/%s is not the binary the image records (sha256 %s)", p, l.BinDir, p, sum)
			}
		}
	}
	return Verdict{OK: true, Reason: fmt.Sprintf("/%s is first in /%s with the image's sha256; plugins %s present", l.Conflist, strings.TrimSuffix(confDir, "/"), strings.Join(plugins, ", "))}
}

// Package cni is the node image's CNI contract, the one piece of the image
// recipe the node itself (kubefarm-agent's agent/cnicheck) needs: where the
// conflist and the plugins are, which plugins the chain runs, the record
// the image's manifest keeps of them (Record, FromRoot), and the conflist
// chaining (ChainPlugins) with its limits. It is a leaf: the standard
// library only, so that the agent links none of the recipe's OCI code
// (images/node imports it, not the other way round).
package cni

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ConflistPath is the one combined CNI configuration the image carries.
// The agent checks that nothing in its folder sorts before it.
const ConflistPath = "etc/cni/net.d/10-kubefarm.conflist"

// BinDir is where the image's CNI plugins are (Debian's
// containernetworking-plugins, plus flannel's); containerd's bin_dir.
const BinDir = "usr/lib/cni"

// SetupPlugins are the plugins a pod's network set-up runs: the chain of
// the conflist (flannel, portmap, bandwidth), what flannel delegates to
// (bridge with host-local IPAM) and the loopback plugin containerd runs for
// every sandbox.
var SetupPlugins = []string{"bandwidth", "bridge", "flannel", "host-local", "loopback", "portmap"}

// ConflistPlugins are the plugin types of the recipe's conflist, in its
// order (a test reads rootfs/ to keep them equal): the BootImage's
// spec.cni.plugins for a manifest written before it recorded its own
// (Record.ConflistPlugins).
var ConflistPlugins = []string{"flannel", "portmap", "bandwidth"}

// Record describes the pod network configuration: the "cni" member of the
// image's manifest.json, and what the agent checks the node against.
type Record struct {
	Conflist       string `json:"conflist"`
	ConflistSHA256 string `json:"conflistSha256"`
	// Plugins maps each of SetupPlugins, and each plugin chained in at
	// build time (ChainPlugins), to its binary's sha256.
	Plugins map[string]string `json:"plugins"`
	// ChainSHA256 is the CNI chain hash: sha256 of ChainText.
	ChainSHA256 string `json:"chainSha256"`
	// ConflistPlugins are the plugin types of the conflist's chain, in its
	// order, chained ones included: the BootImage's spec.cni.plugins.
	ConflistPlugins []string `json:"conflistPlugins,omitempty"`
}

// ChainText is what the CNI chain hash covers: one line
// "conflist <sha256>" then one "<plugin> <sha256>" per plugin, sorted.
func ChainText(conflistSHA string, plugins map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "conflist %s\n", conflistSHA)
	names := make([]string, 0, len(plugins))
	for n := range plugins {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "%s %s\n", n, plugins[n])
	}
	return b.String()
}

// FileSHA256 returns the hex sha256 and size of a file.
func FileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// FromRoot hashes the conflist and the chain's plugins in a root tree:
// SetupPlugins and every other plugin the conflist names (those
// ChainPlugins chained in at build time).
func FromRoot(root string) (Record, error) {
	c := Record{Conflist: "/" + ConflistPath, Plugins: map[string]string{}}
	conf, err := os.ReadFile(filepath.Join(root, ConflistPath))
	if err != nil {
		return c, err
	}
	sum := sha256.Sum256(conf)
	c.ConflistSHA256 = hex.EncodeToString(sum[:])
	plugins, err := chainTypes(conf)
	if err != nil {
		return c, fmt.Errorf("%s: %w", ConflistPath, err)
	}
	if c.ConflistPlugins, err = conflistChain(conf); err != nil {
		return c, fmt.Errorf("%s: %w", ConflistPath, err)
	}
	for _, p := range plugins {
		s, _, err := FileSHA256(filepath.Join(root, BinDir, p))
		if err != nil {
			return c, fmt.Errorf("CNI plugin %s: %w", p, err)
		}
		c.Plugins[p] = s
	}
	sum = sha256.Sum256([]byte(ChainText(c.ConflistSHA256, c.Plugins)))
	c.ChainSHA256 = hex.EncodeToString(sum[:])
	return c, nil
}

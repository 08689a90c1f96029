package cni

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
)

// Bounds of ChainPlugins' input. MaxConflistSize is also the most the
// agent reads of a conflist (agent/cnicheck).
const (
	MaxConflistSize = 1 << 20
	MaxChainEntry   = 64 << 10
	MaxChainEntries = 8
	maxPluginName   = 64
)

// ChainPlugins appends entries, each one plugin's object for the
// conflist's "plugins" array (a service mesh's CNI plugin, say), to the
// chain of conflist, in the given order, and returns the new conflist:
// 2-space indent, trailing newline, the keys of the conflist and of every
// entry in their original order, so the same input always gives the same
// bytes (and no entries give the image's conflist back unchanged).
//
// It refuses a conflist without a non-empty "plugins" array, an entry that
// is not a JSON object with a "type" that is a plain file name (a binary in
// the CNI bin dir; see PluginName), a type the chain already has, duplicate
// keys, and more than MaxChainEntries entries or an entry over
// MaxChainEntry bytes.
func ChainPlugins(conflist []byte, entries ...[]byte) ([]byte, error) {
	if len(conflist) > MaxConflistSize {
		return nil, fmt.Errorf("conflist: %d bytes, more than %d", len(conflist), MaxConflistSize)
	}
	if len(entries) > MaxChainEntries {
		return nil, fmt.Errorf("%d entries to chain, at most %d", len(entries), MaxChainEntries)
	}
	top, err := decodeObject(conflist)
	if err != nil {
		return nil, fmt.Errorf("conflist: %w", err)
	}
	pi := -1
	for i, m := range top {
		if m.key == "plugins" {
			pi = i
		}
	}
	if pi < 0 {
		return nil, fmt.Errorf("conflist: no \"plugins\" array")
	}
	var plugins []json.RawMessage
	if err := json.Unmarshal(top[pi].value, &plugins); err != nil || len(plugins) == 0 {
		return nil, fmt.Errorf("conflist: \"plugins\" is not a non-empty array")
	}
	plugins, err = appendEntries(plugins, entries)
	if err != nil {
		return nil, err
	}
	return encodeChained(top, pi, plugins)
}

// appendEntries appends entries to the conflist's plugins, refusing a
// plugin type that would appear twice in the chain.
func appendEntries(plugins []json.RawMessage, entries [][]byte) ([]json.RawMessage, error) {
	seen := map[string]bool{}
	for i, p := range plugins {
		t, err := EntryType(p)
		if err != nil {
			return nil, fmt.Errorf("conflist: plugins[%d]: %w", i, err)
		}
		if seen[t] {
			return nil, fmt.Errorf("conflist: plugin type %q appears twice in the chain", t)
		}
		seen[t] = true
	}
	for i, e := range entries {
		if len(e) > MaxChainEntry {
			return nil, fmt.Errorf("entry %d: %d bytes, more than %d", i+1, len(e), MaxChainEntry)
		}
		t, err := EntryType(e)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i+1, err)
		}
		if seen[t] {
			return nil, fmt.Errorf("entry %d: plugin type %q is already in the chain", i+1, t)
		}
		seen[t] = true
		plugins = append(plugins, json.RawMessage(bytes.TrimSpace(e)))
	}
	return plugins, nil
}

// encodeChained is the conflist top with its member pi, "plugins",
// replaced by plugins: indented, members and plugins in their order.
func encodeChained(top []member, pi int, plugins []json.RawMessage) ([]byte, error) {
	// Written by hand, not json.Marshal: it would escape <, > and & in
	// strings, changing bytes that need not change.
	var arr bytes.Buffer
	arr.WriteByte('[')
	for i, p := range plugins {
		if i > 0 {
			arr.WriteByte(',')
		}
		arr.Write(p)
	}
	arr.WriteByte(']')
	top[pi].value = arr.Bytes()

	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range top {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.value)
	}
	b.WriteByte('}')
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	if out.Len() > MaxConflistSize {
		return nil, fmt.Errorf("chained conflist: %d bytes, more than %d", out.Len(), MaxConflistSize)
	}
	return out.Bytes(), nil
}

// EntryType returns the "type" of one conflist plugin entry: it must be a
// JSON object, without duplicate keys, whose type is a PluginName.
func EntryType(entry []byte) (string, error) {
	members, err := decodeObject(entry)
	if err != nil {
		return "", err
	}
	for _, m := range members {
		if m.key != "type" {
			continue
		}
		var t string
		if err := json.Unmarshal(m.value, &t); err != nil {
			return "", fmt.Errorf("\"type\" is not a string")
		}
		if err := PluginName(t); err != nil {
			return "", err
		}
		return t, nil
	}
	return "", fmt.Errorf("no \"type\"")
}

// PluginName checks that a plugin type names a file in the CNI bin dir: not
// empty, at most 64 bytes of [A-Za-z0-9._-], and not "." or "..".
func PluginName(t string) error {
	if t == "" || t == "." || t == ".." || len(t) > maxPluginName {
		return fmt.Errorf("plugin type %q is not a plain file name", t)
	}
	for _, c := range []byte(t) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("plugin type %q is not a plain file name (only A-Z a-z 0-9 . _ -)", t)
		}
	}
	return nil
}

// ConflistTypes lists the plugin binaries a conflist's chain runs, each
// once, in order: each plugin's type and ipam type, and a delegate's type
// and ipam type (flannel's; its defaults, bridge and host-local, are not in
// the file). The names are as the file spells them: callers that turn one
// into a path check it with PluginName first.
func ConflistTypes(conflist []byte) ([]string, error) {
	type ipam struct {
		Type string `json:"type"`
	}
	var c struct {
		Plugins []struct {
			Type     string `json:"type"`
			IPAM     *ipam  `json:"ipam"`
			Delegate *struct {
				Type string `json:"type"`
				IPAM *ipam  `json:"ipam"`
			} `json:"delegate"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(conflist, &c); err != nil {
		return nil, fmt.Errorf("not a JSON conflist: %v", err)
	}
	if len(c.Plugins) == 0 {
		return nil, fmt.Errorf("conflist has no plugins")
	}
	var out []string
	add := func(t string) {
		if t != "" && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	for i, p := range c.Plugins {
		if p.Type == "" {
			return nil, fmt.Errorf("plugins[%d] has no type", i)
		}
		add(p.Type)
		if p.IPAM != nil {
			add(p.IPAM.Type)
		}
		if d := p.Delegate; d != nil {
			add(d.Type)
			if d.IPAM != nil {
				add(d.IPAM.Type)
			}
		}
	}
	return out, nil
}

// conflistChain is the plugin types of the conflist's chain, in order (the
// top level of "plugins"; ConflistTypes also lists what they delegate to).
func conflistChain(conflist []byte) ([]string, error) {
	var c struct {
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(conflist, &c); err != nil {
		return nil, fmt.Errorf("not a JSON conflist: %v", err)
	}
	out := make([]string, 0, len(c.Plugins))
	for _, p := range c.Plugins {
		out = append(out, p.Type)
	}
	return out, nil
}

type member struct {
	key   string
	value json.RawMessage
}

// decodeObject reads one JSON object, its members in order; it refuses
// anything else, trailing data and duplicate keys (which CNI runtimes
// would resolve silently).
func decodeObject(b []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("not a JSON object")
	}
	var out []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not JSON: %v", err)
		}
		k := tok.(string) // object keys are strings
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%q: %v", k, err)
		}
		if seen[k] {
			return nil, fmt.Errorf("key %q appears twice", k)
		}
		seen[k] = true
		out = append(out, member{k, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the object")
	}
	return out, nil
}

// chainTypes is every plugin binary a root's conflist needs a record of:
// SetupPlugins and whatever else the conflist names (chained entries).
func chainTypes(conflist []byte) ([]string, error) {
	named, err := ConflistTypes(conflist)
	if err != nil {
		return nil, err
	}
	out := append([]string(nil), SetupPlugins...)
	for _, n := range named {
		if err := PluginName(n); err != nil {
			return nil, err
		}
		if !slices.Contains(SetupPlugins, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

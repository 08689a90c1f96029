package ssa

import "testing"

func TestPruneNulls(t *testing.T) {
	m := map[string]any{"a": nil, "b": map[string]any{"c": nil, "d": 1}, "e": []any{map[string]any{"f": nil, "g": "x"}}}
	PruneNulls(m)
	if _, ok := m["a"]; ok {
		t.Error("top-level null kept")
	}
	if b := m["b"].(map[string]any); len(b) != 1 || b["d"] != 1 {
		t.Errorf("nested map = %v", b)
	}
	if e := m["e"].([]any)[0].(map[string]any); len(e) != 1 || e["g"] != "x" {
		t.Errorf("map in list = %v", e)
	}
}

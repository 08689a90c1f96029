package etcdsnapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSnapshotResultLine(t *testing.T) {
	r := SnapshotResult{File: "t-20260101T000000Z.db", Size: 20512, Revision: 42, Time: "2026-01-01T00:00:00Z", Kept: 1}
	want := `{"file":"t-20260101T000000Z.db","size":20512,"revision":42,"time":"2026-01-01T00:00:00Z","kept":1,"deleted":[]}` + "\n"
	if got := string(r.Line()); got != want {
		t.Errorf("Line() = %s, want %s", got, want)
	}
	if got := string(r.TerminationLine()); got != want {
		t.Errorf("TerminationLine() = %s, want the same line", got)
	}
}

func TestSnapshotResultTerminationLineBounded(t *testing.T) {
	r := SnapshotResult{File: "t-20260101T000000Z.db", Size: 1, Revision: 2, Time: "2026-01-01T00:00:00Z", Kept: 1}
	for i := range 500 {
		r.Deleted = append(r.Deleted, fmt.Sprintf("t-2025%04dT000000Z.db", i))
	}
	full := r.Line()
	if len(full) <= MaxTerminationMessage {
		t.Fatalf("test setup: the full line (%d bytes) should not fit", len(full))
	}
	line := r.TerminationLine()
	if len(line) > MaxTerminationMessage {
		t.Fatalf("TerminationLine() is %d bytes, over %d", len(line), MaxTerminationMessage)
	}
	var got SnapshotResult
	if err := json.Unmarshal(line, &got); err != nil {
		t.Fatalf("TerminationLine() is not JSON: %v", err)
	}
	if len(got.Deleted)+got.DeletedOmitted != 500 || got.DeletedOmitted == 0 {
		t.Errorf("deleted %d + omitted %d, want 500 with some omitted", len(got.Deleted), got.DeletedOmitted)
	}
	if got.Deleted[0] != r.Deleted[0] {
		t.Errorf("the oldest deleted names should stay; first is %s", got.Deleted[0])
	}
	// stdout's line is whole and carries no omission count.
	var whole map[string]any
	if err := json.Unmarshal(full, &whole); err != nil {
		t.Fatal(err)
	}
	if _, ok := whole["deletedOmitted"]; ok {
		t.Error("the full line has deletedOmitted")
	}
}

func TestErrorLine(t *testing.T) {
	cases := map[string]string{
		"short":             "endpoint https://10.0.0.1:2379: status: context deadline exceeded",
		"long ASCII":        strings.Repeat("x", 10000),
		"escaped bytes":     strings.Repeat("\x00\"<", 3000), // each byte up to 6 in JSON
		"multi-byte runes":  strings.Repeat("é☃𝄞", 2000),
		"just over the cap": strings.Repeat("y", MaxTerminationMessage-len(`{"error":""}`+"\n")+1),
		"exactly the cap":   strings.Repeat("y", MaxTerminationMessage-len(`{"error":""}`+"\n")),
	}
	for name, msg := range cases {
		t.Run(name, func(t *testing.T) {
			line := ErrorLine(errors.New(msg))
			if len(line) > MaxTerminationMessage {
				t.Fatalf("%d bytes, over %d", len(line), MaxTerminationMessage)
			}
			if line[len(line)-1] != '\n' {
				t.Error("no newline at the end")
			}
			var got struct{ Error string }
			if err := json.Unmarshal(line, &got); err != nil {
				t.Fatalf("not JSON: %v: %q", err, line)
			}
			if !utf8.ValidString(got.Error) {
				t.Error("cut inside a character")
			}
			if fits := len(jsonLine(map[string]string{"error": msg})) <= MaxTerminationMessage; fits {
				if got.Error != msg {
					t.Errorf("a message that fits was changed: %q", got.Error)
				}
			} else if !strings.HasSuffix(got.Error, "(truncated)") || !strings.HasPrefix(msg, strings.TrimSuffix(got.Error, " ...(truncated)")) {
				t.Errorf("a cut message should be a marked prefix of the original: %q", got.Error[max(0, len(got.Error)-40):])
			}
		})
	}
}

func TestWriteTerminationLog(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "termination-log")
	if err := os.WriteFile(existing, []byte("previous content that is longer than the line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteTerminationLog(existing, []byte("{\"a\":1}\n")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(existing); string(b) != "{\"a\":1}\n" {
		t.Errorf("termination log holds %q", b)
	}

	// Outside a pod: no file, none created, no error.
	missing := filepath.Join(dir, "absent")
	if err := WriteTerminationLog(missing, []byte("x\n")); err != nil {
		t.Errorf("missing file: %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the termination log was created: %v", err)
	}
	if err := WriteTerminationLog("", []byte("x\n")); err != nil {
		t.Errorf("empty path: %v", err)
	}
}

package etcdsnapshot

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestPlanRetention(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	const stale = 10 * time.Minute
	file := func(name string) Entry { return Entry{Name: name, ModTime: now.Add(-time.Hour), Regular: true} }
	young := func(name string) Entry { return Entry{Name: name, ModTime: now.Add(-time.Minute), Regular: true} }
	const cur = "t-20260601T120000Z.db"

	cases := []struct {
		name       string
		entries    []Entry
		retain     int
		wantKept   []string
		wantDelete []string
		wantStale  []string
		wantOrphan []string
		// wantRemoved is what DeleteSnapshots removes, in order (default:
		// wantDelete).
		wantRemoved []string
	}{
		{
			name:     "only the new one",
			entries:  []Entry{file(cur)},
			retain:   7,
			wantKept: []string{cur},
		},
		{
			name:     "fewer than retain: nothing deleted",
			entries:  []Entry{file(cur), file("t-20260531T120000Z.db"), file("t-20260530T120000Z.db")},
			retain:   3,
			wantKept: []string{cur, "t-20260531T120000Z.db", "t-20260530T120000Z.db"},
		},
		{
			name: "the oldest beyond retain go, oldest first, whatever the listing order",
			entries: []Entry{
				file("t-20260529T120000Z.db"), file(cur), file("t-20260531T120000Z.db"),
				file("t-20260101T000000Z.db"), file("t-20260530T120000Z.db"),
			},
			retain:     3,
			wantKept:   []string{cur, "t-20260531T120000Z.db", "t-20260530T120000Z.db"},
			wantDelete: []string{"t-20260101T000000Z.db", "t-20260529T120000Z.db"},
		},
		{
			name:       "retain 1 keeps only the new one",
			entries:    []Entry{file("t-20260531T120000Z.db"), file(cur), file("t-20260530T120000Z.db")},
			retain:     1,
			wantKept:   []string{cur},
			wantDelete: []string{"t-20260530T120000Z.db", "t-20260531T120000Z.db"},
		},
		{
			name: "a name from a clock that ran ahead never displaces the new one",
			entries: []Entry{
				file("t-20990101T000000Z.db"), file(cur), file("t-20260531T120000Z.db"),
			},
			retain:     2,
			wantKept:   []string{cur, "t-20990101T000000Z.db"},
			wantDelete: []string{"t-20260531T120000Z.db"},
		},
		{
			name: "other files are never touched",
			entries: []Entry{
				file(cur), file("t-20260531T120000Z.db"),
				file("t-b-20200101T000000Z.db"),                 // another tenant, prefix t-b
				file("u-20200101T000000Z.db"),                   // another prefix
				file("t-20200101T000000Z.db.bak"),               // an operator's copy
				file("notes.txt"),                               // anything else
				file("t-2020-01-01.db"),                         // not our time format
				file(".t-20200101T000000Z.db.part.x"),           // not our temp name
				{Name: "t-20200101T000000Z.db", Regular: false}, // a directory or symlink
			},
			retain:   1,
			wantKept: []string{cur},
			wantDelete: []string{
				"t-20260531T120000Z.db",
			},
		},
		{
			name: "stale temporary files of the prefix go, young ones (a run in flight) stay",
			entries: []Entry{
				file(cur),
				file(".t-20260601T100000Z.db.part"),
				young(".t-20260601T115900Z.db.part"),
				file(".u-20260601T100000Z.db.part"),
			},
			retain:    7,
			wantKept:  []string{cur},
			wantStale: []string{".t-20260601T100000Z.db.part"},
		},
		{
			name: "a snapshot's key file goes right after it; kept ones keep theirs",
			entries: []Entry{
				file(cur), file(KeysName(cur)),
				file("t-20260531T120000Z.db"), file("t-20260531T120000Z.db.keys.age"),
				file("t-20260530T120000Z.db"), file("t-20260530T120000Z.db.keys.age"),
				file("t-20260529T120000Z.db"), // taken before key files
			},
			retain:      2,
			wantKept:    []string{cur, "t-20260531T120000Z.db"},
			wantDelete:  []string{"t-20260529T120000Z.db", "t-20260530T120000Z.db"},
			wantRemoved: []string{"t-20260529T120000Z.db", "t-20260530T120000Z.db", "t-20260530T120000Z.db.keys.age"},
		},
		{
			name: "a key file without its snapshot goes once stale; its temporary file is a temporary file",
			entries: []Entry{
				file(cur), young(KeysName(cur)),
				file("t-20260530T120000Z.db.keys.age"),
				young("t-20260601T115900Z.db.keys.age"), // a run in flight, before its rename
				file("u-20260530T120000Z.db.keys.age"),  // another prefix
				file("t-20260530T120000Z.db.keys.age.bak"),
				file(".t-20260601T100000Z.db.keys.age.part"),
			},
			retain:     7,
			wantKept:   []string{cur},
			wantStale:  []string{".t-20260601T100000Z.db.keys.age.part"},
			wantOrphan: []string{"t-20260530T120000Z.db.keys.age"},
		},
		{
			name:     "retain below 1 still keeps the new one",
			entries:  []Entry{file(cur)},
			retain:   0,
			wantKept: []string{cur},
		},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			p := PlanRetention("t", tt.entries, cur, tt.retain, now, stale)
			if !slices.Equal(p.Kept, tt.wantKept) {
				t.Errorf("kept %q, want %q", p.Kept, tt.wantKept)
			}
			if !slices.Equal(p.Delete, tt.wantDelete) {
				t.Errorf("delete %q, want %q", p.Delete, tt.wantDelete)
			}
			if !slices.Equal(p.StaleTemps, tt.wantStale) {
				t.Errorf("stale temps %q, want %q", p.StaleTemps, tt.wantStale)
			}
			if !slices.Equal(p.OrphanKeys, tt.wantOrphan) {
				t.Errorf("orphan key files %q, want %q", p.OrphanKeys, tt.wantOrphan)
			}
			want := tt.wantRemoved
			if want == nil {
				want = tt.wantDelete
			}
			var removed []string
			if _, _, err := p.DeleteSnapshots(func(name string) error { removed = append(removed, name); return nil }); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(removed, want) {
				t.Errorf("removed %q, want %q", removed, want)
			}
		})
	}
}

// TestDeleteSnapshots: the count of what is left is right whether removal
// finishes or stops at a failure, and the failure is returned.
func TestDeleteSnapshots(t *testing.T) {
	plan := RetentionPlan{Kept: []string{"c", "d"}, Delete: []string{"a", "b"}}
	var removed []string
	kept, deleted, err := plan.DeleteSnapshots(func(name string) error { removed = append(removed, name); return nil })
	if err != nil || kept != 2 || !slices.Equal(deleted, []string{"a", "b"}) || !slices.Equal(removed, []string{"a", "b"}) {
		t.Errorf("all removed: kept %d, deleted %v, removed %v, err %v", kept, deleted, removed, err)
	}
	boom := errors.New("access denied")
	kept, deleted, err = plan.DeleteSnapshots(func(name string) error {
		if name == "b" {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || kept != 3 || !slices.Equal(deleted, []string{"a"}) {
		t.Errorf("second removal failed: kept %d, deleted %v, err %v; want 3, [a], %v", kept, deleted, err, boom)
	}
	kept, deleted, err = RetentionPlan{Kept: []string{"c"}}.DeleteSnapshots(func(string) error { t.Error("nothing to remove"); return nil })
	if err != nil || kept != 1 || deleted == nil || len(deleted) != 0 {
		t.Errorf("nothing planned: kept %d, deleted %#v, err %v; want 1 and an empty list", kept, deleted, err)
	}
}

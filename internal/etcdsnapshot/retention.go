package etcdsnapshot

import (
	"sort"
	"time"
)

// Entry is one directory entry as retention sees it.
type Entry struct {
	Name    string
	ModTime time.Time
	// Regular is false for directories, symlinks and other special files,
	// which retention never deletes whatever their name.
	Regular bool
}

// RetentionPlan is what retention does in --dir after a snapshot.
type RetentionPlan struct {
	// Kept are the snapshots of the prefix that stay: the one just
	// written first, then the others newest first.
	Kept []string
	// Delete are the snapshots beyond --retain, oldest first.
	Delete []string
	// StaleTemps are temporary files of the prefix left by runs that died
	// before cleaning up (killed, node lost), older than staleAfter.
	StaleTemps []string
	// OrphanKeys are key files whose snapshot is gone, older than
	// staleAfter: left by a run that died between deleting a snapshot and
	// its key file.
	OrphanKeys []string
	// keys are the snapshots (of Delete) that have a key file beside them,
	// which DeleteSnapshots deletes with them.
	keys map[string]bool
}

// PlanRetention decides which snapshots of prefix to delete so that retain
// of them are left, current (the one just written) among them.
//
// Snapshots are ordered by the time in their names, not by modification
// time, which a copy or restore of the backup volume changes. current is
// kept even if another name carries a later time (a clock that once ran
// ahead): a retention that deleted the snapshot it was run for would leave
// the newest data unsaved. Only names ParseSnapshotName accepts for prefix
// count; every other file in the directory is left alone.
//
// A temporary file is stale only once it is older than staleAfter (the
// snapshot timeout): a younger one may belong to a run still streaming.
func PlanRetention(prefix string, entries []Entry, current string, retain int, now time.Time, staleAfter time.Duration) RetentionPlan {
	type snap struct {
		name string
		t    time.Time
	}
	var others []snap
	plan := RetentionPlan{keys: map[string]bool{}}
	snapshots := map[string]bool{current: true}
	keyFiles := map[string]Entry{}
	for _, e := range entries {
		if !e.Regular || e.Name == current {
			continue
		}
		if t, ok := ParseSnapshotName(prefix, e.Name); ok {
			others = append(others, snap{e.Name, t})
			snapshots[e.Name] = true
			continue
		}
		if s, ok := ParseKeysName(prefix, e.Name); ok {
			keyFiles[s] = e
			continue
		}
		if _, ok := ParseTempName(prefix, e.Name); ok && now.Sub(e.ModTime) > staleAfter {
			plan.StaleTemps = append(plan.StaleTemps, e.Name)
		}
	}
	for s, e := range keyFiles {
		if !snapshots[s] && now.Sub(e.ModTime) > staleAfter {
			plan.OrphanKeys = append(plan.OrphanKeys, e.Name)
		}
	}
	sort.Strings(plan.OrphanKeys)
	// Newest first; names break ties, though equal times mean equal names.
	sort.Slice(others, func(i, j int) bool {
		if !others[i].t.Equal(others[j].t) {
			return others[i].t.After(others[j].t)
		}
		return others[i].name > others[j].name
	})
	keep := max(retain, 1) - 1 // current takes one place
	plan.Kept = append(plan.Kept, current)
	for i, s := range others {
		if i < keep {
			plan.Kept = append(plan.Kept, s.name)
		} else {
			plan.Delete = append(plan.Delete, s.name)
			if _, ok := keyFiles[s.name]; ok {
				plan.keys[s.name] = true
			}
		}
	}
	// Oldest first, the order they are deleted in: if deletion stops
	// halfway, what is left is still the newest snapshots.
	for i, j := 0, len(plan.Delete)-1; i < j; i, j = i+1, j-1 {
		plan.Delete[i], plan.Delete[j] = plan.Delete[j], plan.Delete[i]
	}
	sort.Strings(plan.StaleTemps)
	return plan
}

// DeleteSnapshots removes the plan's Delete snapshots, oldest first, with
// remove, each followed by its key file, stopping at the first error. The
// snapshot goes first: a run stopped in between leaves a key file without
// its snapshot (sealed, and deleted as an orphan later), never a snapshot
// without its keys. kept counts the snapshots of the prefix still there
// (those removal has not reached included); deleted names the removed
// snapshots, empty rather than nil.
func (p RetentionPlan) DeleteSnapshots(remove func(name string) error) (kept int, deleted []string, err error) {
	kept = len(p.Kept) + len(p.Delete)
	deleted = []string{}
	for _, name := range p.Delete {
		if err := remove(name); err != nil {
			return kept, deleted, err
		}
		kept--
		deleted = append(deleted, name)
		if p.keys[name] {
			if err := remove(KeysName(name)); err != nil {
				return kept, deleted, err
			}
		}
	}
	return kept, deleted, nil
}

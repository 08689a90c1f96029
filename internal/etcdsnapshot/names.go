package etcdsnapshot

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/kubefarm/kubefarm/internal/backupkeys"
)

// TimeLayout is the UTC time in a snapshot's file name. Fixed width, so
// names of one prefix sort in time order, and without ':' so the names are
// valid on every file system a backup volume might use.
const TimeLayout = "20060102T150405Z"

const (
	snapshotSuffix = ".db"
	tempSuffix     = ".part"
	// MaxPrefixLen keeps the longest name Save writes (".<prefix>-<time>.db.keys.age.part")
	// well under the 255 bytes most file systems allow, and fits a
	// "<namespace>-<name>" of two 63-character DNS labels.
	MaxPrefixLen = 200
)

// prefixRE is a DNS-1123 subdomain's alphabet: it cannot hold a slash, so a
// prefix cannot leave --dir, and it cannot start with '.', so a snapshot
// never looks like one of Save's hidden temporary files.
var prefixRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`)

// ValidatePrefix checks a --prefix value.
func ValidatePrefix(prefix string) error {
	switch {
	case prefix == "":
		return fmt.Errorf("--prefix is required (for example the tenant's <namespace>-<name>)")
	case len(prefix) > MaxPrefixLen:
		return fmt.Errorf("--prefix %q is %d bytes long, at most %d", prefix, len(prefix), MaxPrefixLen)
	case !prefixRE.MatchString(prefix):
		return fmt.Errorf("--prefix %q: use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit", prefix)
	}
	return nil
}

// SnapshotName is the final name of a snapshot of prefix taken at t:
// <prefix>-<UTC time as 20060102T150405Z>.db.
func SnapshotName(prefix string, t time.Time) string {
	return prefix + "-" + t.UTC().Format(TimeLayout) + snapshotSuffix
}

// TempName is where Save streams the snapshot named SnapshotName(prefix, t)
// before it is verified. The leading '.' hides it from tools that list
// snapshots, and its suffix keeps it out of ParseSnapshotName.
func TempName(prefix string, t time.Time) string {
	return "." + SnapshotName(prefix, t) + tempSuffix
}

// ParseSnapshotName returns the time in name when name is exactly a
// snapshot name Save writes for prefix, and false for anything else:
// another prefix (also one that merely starts with this one, such as
// "a-b-<time>.db" for prefix "a"), other suffixes, and times that do not
// format back to the same text.
func ParseSnapshotName(prefix, name string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(name, prefix+"-")
	if !ok {
		return time.Time{}, false
	}
	stamp, ok := strings.CutSuffix(rest, snapshotSuffix)
	if !ok || len(stamp) != len(TimeLayout) {
		return time.Time{}, false
	}
	t, err := time.Parse(TimeLayout, stamp)
	if err != nil || t.Format(TimeLayout) != stamp {
		return time.Time{}, false
	}
	return t, true
}

// ParseTempName is ParseSnapshotName for Save's temporary files, those of
// a snapshot and those of its key file.
func ParseTempName(prefix, name string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(name, ".")
	if !ok {
		return time.Time{}, false
	}
	rest, ok = strings.CutSuffix(rest, tempSuffix)
	if !ok {
		return time.Time{}, false
	}
	if snap, ok := ParseKeysName(prefix, rest); ok {
		rest = snap
	}
	return ParseSnapshotName(prefix, rest)
}

// KeysSuffix ends a key file's name: the snapshot's name, then this
// (backupkeys.FileSuffix; docs/etcd.md, "The key file").
const KeysSuffix = backupkeys.FileSuffix

// KeysName is the name of the key file stored beside the snapshot named
// snapshot.
func KeysName(snapshot string) string { return snapshot + KeysSuffix }

// ParseKeysName returns the snapshot name a key file's name is for, when
// name is exactly KeysName of a snapshot name Save writes for prefix.
func ParseKeysName(prefix, name string) (snapshot string, ok bool) {
	snapshot, ok = strings.CutSuffix(name, KeysSuffix)
	if !ok {
		return "", false
	}
	if _, ok := ParseSnapshotName(prefix, snapshot); !ok {
		return "", false
	}
	return snapshot, true
}

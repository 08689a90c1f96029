package etcdsnapshot

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
	"unicode/utf8"

	"filippo.io/age"

	"github.com/kubefarm/kubefarm/internal/backupkeys"
)

// MaxTerminationMessage bounds what is written to the termination log. The
// kubelet keeps at most 4096 bytes of it and cuts the rest, which would
// leave half a JSON object; staying below that with room to spare keeps
// the line whole.
const MaxTerminationMessage = 4000

// SnapshotResult is the outcome of a snapshot run, printed as one JSON line.
type SnapshotResult struct {
	// File is the snapshot's name in --dir.
	File string `json:"file"`
	// Size is the file's size in bytes, etcd's sha256 trailer included.
	Size int64 `json:"size"`
	// Revision is the etcd revision the snapshot holds (read from the
	// file, so it is the snapshot's, not the cluster's a moment later).
	Revision int64 `json:"revision"`
	// Time is the time in the file's name, RFC 3339.
	Time string `json:"time"`
	// Bucket and Object are where the snapshot was uploaded (--s3-bucket,
	// and the object's full key: --s3-prefix and File); empty without
	// --s3-bucket.
	Bucket string `json:"bucket,omitempty"`
	Object string `json:"object,omitempty"`
	// Keys is the key file's name beside the snapshot (KeysName(File)),
	// and KeysObject its object's full key in the bucket; empty without
	// --keys-config.
	Keys       string `json:"keys,omitempty"`
	KeysObject string `json:"keysObject,omitempty"`
	// Kept is how many snapshots of the prefix are left, this one included:
	// in the bucket when one is used (under --s3-prefix), in --dir
	// otherwise.
	Kept int `json:"kept"`
	// Deleted are the snapshots retention removed, oldest first: names
	// after --s3-prefix in the bucket when one is used, in --dir otherwise.
	Deleted []string `json:"deleted"`
	// DeletedOmitted counts names left out of Deleted in the termination
	// log's copy, when the whole list would not fit; only ever set there.
	DeletedOmitted int `json:"deletedOmitted,omitempty"`
}

// RestoreResult is the outcome of a restore run, printed as one JSON line.
type RestoreResult struct {
	// Action is "restored", or "skipped" when the data directory already
	// held a member.
	Action   string `json:"action"`
	DataDir  string `json:"dataDir"`
	Snapshot string `json:"snapshot"`
	// Revision is the snapshot's etcd revision (restored only).
	Revision int64  `json:"revision,omitempty"`
	Message  string `json:"message"`
}

// Restore actions.
const (
	ActionRestored = "restored"
	ActionSkipped  = "skipped"
)

// Line is r as one JSON line, whole, for stdout.
func (r SnapshotResult) Line() []byte {
	if r.Deleted == nil {
		r.Deleted = []string{}
	}
	return jsonLine(r)
}

// TerminationLine is r as one JSON line of at most MaxTerminationMessage
// bytes: when the list of deleted snapshots (a first run on a full
// directory with a small --retain) would not fit, the newest names are
// left out and counted in deletedOmitted.
func (r SnapshotResult) TerminationLine() []byte {
	line := r.Line()
	for len(line) > MaxTerminationMessage && len(r.Deleted) > 0 {
		r.Deleted = r.Deleted[:len(r.Deleted)-1]
		r.DeletedOmitted++
		line = r.Line()
	}
	return line
}

// Line is r as one JSON line.
func (r RestoreResult) Line() []byte { return jsonLine(r) }

// CheckResult is the outcome of a restore-check run: what the key file
// holds (names, never keys), or the reason it cannot be restored.
type CheckResult struct {
	Snapshot string `json:"snapshot"`
	Keys     string `json:"keys"`
	// Reason and Error say why the pair cannot be restored (a reason of
	// Preflight's); empty when it can.
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
	// Tenant, TakenAt, Write and KeyNames are the key file's, when it
	// opened and reads the snapshot.
	Tenant   string   `json:"tenant,omitempty"`
	TakenAt  string   `json:"takenAt,omitempty"`
	Write    string   `json:"write,omitempty"`
	KeyNames []string `json:"keyNames,omitempty"`
	// Sealed is the keys again, sealed to the identities' own recipients
	// only and base64-encoded (restore-check --reseal): how a restore's
	// check hands them to the manager through a termination message, which
	// anyone reading pods may see, without the original file's size (one
	// stanza per backup recipient). Opening it takes the identity again.
	Sealed string `json:"sealed,omitempty"`
}

// CheckLine is restore-check's result line for Preflight's keys and error.
func CheckLine(snapshot, keyFile string, k backupkeys.Keys, err error) []byte {
	return jsonLine(checkResult(snapshot, keyFile, k, err))
}

// ResealedCheckLine is CheckLine for keys that passed Preflight, with the
// keys sealed to recipients in Sealed. It fails rather than write a line
// the kubelet would cut (a file of dozens of keys).
func ResealedCheckLine(snapshot, keyFile string, k backupkeys.Keys, recipients []age.Recipient) ([]byte, error) {
	r := checkResult(snapshot, keyFile, k, nil)
	var sealed bytes.Buffer
	if err := backupkeys.Seal(&sealed, k, recipients...); err != nil {
		return nil, err
	}
	r.Sealed = base64.StdEncoding.EncodeToString(sealed.Bytes())
	line := jsonLine(r)
	if len(line) > MaxTerminationMessage {
		return nil, fmt.Errorf("the result with %d keys sealed is %d bytes, more than a termination message holds (%d)",
			len(k.Keys), len(line), MaxTerminationMessage)
	}
	return line, nil
}

func checkResult(snapshot, keyFile string, k backupkeys.Keys, err error) CheckResult {
	r := CheckResult{Snapshot: snapshot, Keys: keyFile}
	if err != nil {
		r.Error = err.Error()
		var e *backupkeys.Error
		if errors.As(err, &e) {
			r.Reason, r.Error = e.Reason, e.Err.Error()
		}
		if len(r.Error) > 2000 {
			cut := 2000 // on a character boundary, as ErrorLine cuts
			for cut > 0 && !utf8.RuneStart(r.Error[cut]) {
				cut--
			}
			r.Error = r.Error[:cut] + " ...(truncated)"
		}
		return r
	}
	r.Tenant, r.Write, r.KeyNames = k.Tenant, k.Write, k.Names()
	if !k.TakenAt.IsZero() { // keys in the clear (--keys-config) say no time
		r.TakenAt = k.TakenAt.UTC().Format(time.RFC3339)
	}
	return r
}

// ErrorLine is {"error":"..."} for a failed run, the message cut (on a
// character boundary, marked) so that the line stays within
// MaxTerminationMessage bytes however the message escapes.
func ErrorLine(err error) []byte {
	msg := "unknown error"
	if err != nil {
		msg = err.Error()
	}
	const mark = " ...(truncated)"
	line := jsonLine(map[string]string{"error": msg})
	cut := len(msg)
	for len(line) > MaxTerminationMessage && cut > 0 {
		// Every byte of the message takes at least one byte of the line,
		// so cutting the excess gets there in a step or two.
		cut = max(cut-(len(line)-MaxTerminationMessage)-len(mark), 0)
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		line = jsonLine(map[string]string{"error": msg[:cut] + mark})
	}
	return line
}

func jsonLine(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Only strings, numbers and string slices: cannot happen.
		panic(err)
	}
	return append(b, '\n')
}

// WriteTerminationLog writes line to path when the file exists and can be
// written, as the kubelet's termination log does in a container; an empty
// path, or a path that does not exist or cannot be written (the tool run
// outside a pod), writes nothing. The file is never created: outside a pod
// the default /dev/termination-log would otherwise become a stray file in
// /dev.
func WriteTerminationLog(path string, line []byte) error {
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(line) > MaxTerminationMessage {
		line = line[:MaxTerminationMessage]
	}
	if _, err := f.Write(line); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

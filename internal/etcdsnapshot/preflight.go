package etcdsnapshot

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"

	"filippo.io/age"
	"go.uber.org/zap"

	"github.com/kubefarm/kubefarm/internal/backupkeys"
)

// Reasons Preflight gives about the snapshot itself; those about its key
// file are backupkeys'.
const (
	// ReasonSnapshotMissing: no snapshot file where the restore looks.
	ReasonSnapshotMissing = "SnapshotMissing"
	// ReasonSnapshotDamaged: the file is not a whole snapshot (Verify).
	ReasonSnapshotDamaged = "SnapshotDamaged"
)

// Preflight is a restore's check before any member starts: the snapshot at
// snapshot is whole (Verify), its key file at keyFile opens with one of
// the identities, is bound to this snapshot (sha256), and its keys decrypt
// every encrypted value the snapshot holds (backupkeys.Check). It returns
// the keys, or a *backupkeys.Error whose Reason names what is missing or
// wrong; messages name files and keys, never key material.
func Preflight(snapshot, keyFile string, lg *zap.Logger, identities ...age.Identity) (backupkeys.Keys, error) {
	if _, err := os.Stat(snapshot); errors.Is(err, fs.ErrNotExist) {
		return backupkeys.Keys{}, &backupkeys.Error{Reason: ReasonSnapshotMissing, Err: err}
	}
	st, err := Verify(snapshot, lg)
	if err != nil {
		return backupkeys.Keys{}, &backupkeys.Error{Reason: ReasonSnapshotDamaged, Err: err}
	}
	samples, err := EncryptedValues(snapshot)
	if err != nil {
		return backupkeys.Keys{}, &backupkeys.Error{Reason: ReasonSnapshotDamaged, Err: err}
	}
	var sealed io.Reader // nil: no key file
	b, err := readBounded(keyFile, backupkeys.MaxFileSize)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return backupkeys.Keys{}, &backupkeys.Error{Reason: backupkeys.ReasonKeysDamaged, Err: err}
	default:
		sealed = bytes.NewReader(b)
	}
	return backupkeys.Check(sealed, st.SHA256, samples, identities...)
}

// PreflightConfig is Preflight for keys given in the clear, as the
// EncryptionConfiguration at config (a key Secret copied by hand, rendered
// as the API servers read it) instead of a sealed key file: the snapshot
// is whole and those keys decrypt every encrypted value it holds.
func PreflightConfig(snapshot, config string, lg *zap.Logger) (backupkeys.Keys, error) {
	k, err := readKeysConfig(config)
	if err != nil {
		return backupkeys.Keys{}, &backupkeys.Error{Reason: backupkeys.ReasonKeysDamaged, Err: err}
	}
	if _, err := os.Stat(snapshot); errors.Is(err, fs.ErrNotExist) {
		return backupkeys.Keys{}, &backupkeys.Error{Reason: ReasonSnapshotMissing, Err: err}
	}
	if _, err := Verify(snapshot, lg); err != nil {
		return backupkeys.Keys{}, &backupkeys.Error{Reason: ReasonSnapshotDamaged, Err: err}
	}
	samples, err := EncryptedValues(snapshot)
	if err != nil {
		return backupkeys.Keys{}, &backupkeys.Error{Reason: ReasonSnapshotDamaged, Err: err}
	}
	return k, k.Read(samples)
}

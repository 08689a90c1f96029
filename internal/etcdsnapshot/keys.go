package etcdsnapshot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"filippo.io/age"
	"go.uber.org/zap"

	"github.com/kubefarm/kubefarm/internal/backupkeys"
)

// SealKeys builds the key file of the verified snapshot at path (whose
// whole-file sha256 Verify returned as sum), taken at taken: the keys of the EncryptionConfiguration at o.KeysConfig, bound to
// the snapshot's sha256 and sealed to the recipients in o.KeysRecipients.
// It refuses keys that do not decrypt every encrypted value the snapshot
// names (a key file read after a rotation dropped a key the snapshot still
// uses): a run that stored such a pair would keep a backup that cannot be
// restored.
func SealKeys(o SnapshotOptions, path, sum string, taken time.Time) ([]byte, error) {
	k, err := readKeysConfig(o.KeysConfig)
	if err != nil {
		return nil, err
	}
	recipients, err := ReadRecipients(o.KeysRecipients)
	if err != nil {
		return nil, err
	}
	samples, err := EncryptedValues(path)
	if err != nil {
		return nil, err
	}
	k.Tenant, k.SnapshotSHA256, k.TakenAt = o.Prefix, sum, taken.UTC()
	if err := k.Read(samples); err != nil {
		return nil, fmt.Errorf("the keys of --keys-config %s do not read the snapshot: %w", o.KeysConfig, err)
	}
	var buf bytes.Buffer
	if err := backupkeys.Seal(&buf, k, recipients...); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// readKeysConfig reads the keys of the EncryptionConfiguration file.
func readKeysConfig(file string) (backupkeys.Keys, error) {
	cfg, err := readBounded(file, backupkeys.MaxFileSize)
	if err != nil {
		return backupkeys.Keys{}, fmt.Errorf("--keys-config: %w", err)
	}
	write, keys, err := backupkeys.FromEncryptionConfiguration(cfg)
	if err != nil {
		return backupkeys.Keys{}, fmt.Errorf("--keys-config %s: %w", file, err)
	}
	return backupkeys.Keys{Write: write, Keys: keys}, nil
}

// ReadRecipients reads a file of age recipients (backupkeys.ParseRecipients).
func ReadRecipients(file string) ([]age.Recipient, error) {
	b, err := readBounded(file, backupkeys.MaxRecipientsFile)
	if err != nil {
		return nil, fmt.Errorf("--keys-recipients: %w", err)
	}
	rs, err := backupkeys.ParseRecipients(b)
	if err != nil {
		return nil, fmt.Errorf("--keys-recipients %s %w", file, err)
	}
	return rs, nil
}

// ReadIdentities reads a file of age identities, as `age -i` does. Errors
// name the file, never its content.
func ReadIdentities(file string) ([]age.Identity, error) {
	b, err := readBounded(file, backupkeys.MaxRecipientsFile)
	if err != nil {
		return nil, fmt.Errorf("--identity: %w", err)
	}
	ids, err := age.ParseIdentities(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("--identity %s: no age identity in it, or a malformed one", file)
	}
	return ids, nil
}

// readBounded reads a file of at most limit bytes.
func readBounded(file string, limit int64) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", file, limit)
	}
	return b, nil
}

// saveKeys writes the key file of the snapshot named name (already in
// o.Dir, of whole-file sha256 sum) beside it, as a snapshot is written: a hidden temporary file,
// fsync, a rename that never replaces, fsync of the directory. It returns
// the key file's name.
func saveKeys(o SnapshotOptions, name, sum string, taken time.Time, lg *zap.Logger) (string, error) {
	fail := func(step string, err error) (string, error) {
		return "", &StepError{Step: step, Err: err}
	}
	sealed, err := SealKeys(o, filepath.Join(o.Dir, name), sum, taken)
	if err != nil {
		return fail("sealing the snapshot's keys", err)
	}
	keys := KeysName(name)
	tmp := filepath.Join(o.Dir, "."+keys+tempSuffix)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fail("creating the key file's temporary file", err)
	}
	_, err = f.Write(sealed)
	err = errors.Join(err, f.Sync(), f.Close())
	if err == nil {
		err = renameNoReplace(tmp, filepath.Join(o.Dir, keys))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fail("writing the key file", err)
	}
	if err := syncDir(o.Dir); err != nil {
		return fail("fsync of --dir after the key file's rename", err)
	}
	lg.Info("key file saved", zap.String("file", filepath.Join(o.Dir, keys)), zap.Int("bytes", len(sealed)))
	return keys, nil
}

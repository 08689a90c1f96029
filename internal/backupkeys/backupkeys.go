// Package backupkeys is the file that makes a tenant's etcd snapshot a whole
// backup: the encryption-at-rest keys in force when the snapshot was taken,
// bound to that snapshot by its sha256 and sealed with age
// (filippo.io/age) to the operator's backup key.
//
// Why a file of its own beside the snapshot, and sealed: the snapshot holds
// the tenant's Secrets encrypted with those keys, so the snapshot alone
// reveals no Secret, and the keys alone decrypt nothing without the
// snapshot. Kept together and in the clear they would be a plaintext backup;
// sealed to an age recipient, reading them needs the backup key's identity,
// which the component taking backups never holds (it only seals). The
// format is age's own, so an operator can open a key file in a disaster with
// the age command line and no kubefarm at all.
//
// The package is pure apart from age: Seal writes a key file, Open reads one
// back, and Check gives a restore's verdict before any etcd member starts.
package backupkeys

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"

	"filippo.io/age"
	"golang.org/x/crypto/nacl/secretbox"
)

// Format names this file's JSON content, inside the age envelope.
const Format = "kubefarm.io/backup-keys/v1"

// FileSuffix ends a key file's name: the snapshot's name, then this (the
// file is an age file). The backup writes it, a restore looks for it.
const FileSuffix = ".keys.age"

// Bounds on what Open accepts: a key file is a few hundred bytes, and a
// file from storage is input like any other.
const (
	// MaxFileSize bounds the sealed file read by Open.
	MaxFileSize = 64 << 10
	// MaxKeys bounds the keys in one file; a rotation holds two or three.
	MaxKeys = 64
	// KeySize is the size of each key (secretbox's 32 bytes).
	KeySize = 32
)

// keyName is the API server's provider key name kubefarm writes (key-<n>).
var keyName = regexp.MustCompile(`^key-[1-9][0-9]{0,8}$`)

// Keys are the encryption keys of one snapshot.
type Keys struct {
	// Tenant is the TenantCluster the snapshot was taken of (the backup
	// job's --prefix, the tenant's name):
	// shown to an operator choosing a file, not checked on restore (a
	// restore into a tenant of another name is the point).
	Tenant string `json:"tenant"`
	// SnapshotSHA256 is the hex sha256 of the whole snapshot file, which
	// binds the keys to it.
	SnapshotSHA256 string `json:"snapshotSHA256"`
	// TakenAt is when the snapshot was taken.
	TakenAt time.Time `json:"takenAt"`
	// Write is the key the API servers wrote with.
	Write string `json:"write"`
	// Keys by name, 32 bytes each: every key the API servers could read
	// with, since a snapshot taken mid-rotation holds values of two.
	Keys map[string][]byte `json:"keys"`
}

// file is the sealed JSON: Keys with the format tag first.
type file struct {
	Format string `json:"format"`
	Keys
}

// Validate checks what a restore relies on.
func (k Keys) Validate() error {
	if len(k.Keys) == 0 {
		return errors.New("no keys")
	}
	if len(k.Keys) > MaxKeys {
		return fmt.Errorf("%d keys, at most %d", len(k.Keys), MaxKeys)
	}
	for _, name := range k.Names() {
		if !keyName.MatchString(name) {
			return fmt.Errorf("key %.40q: name must be key-<n>", name)
		}
		if n := len(k.Keys[name]); n != KeySize {
			return fmt.Errorf("key %s: %d bytes, want %d", name, n, KeySize)
		}
	}
	if _, ok := k.Keys[k.Write]; !ok {
		return fmt.Errorf("write key %.40q is not among the keys", k.Write)
	}
	if b, err := hex.DecodeString(k.SnapshotSHA256); err != nil || len(b) != 32 {
		return fmt.Errorf("snapshotSHA256 %.80q is not a hex sha256", k.SnapshotSHA256)
	}
	return nil
}

// Names are the keys' names, sorted.
func (k Keys) Names() []string {
	names := make([]string, 0, len(k.Keys))
	for n := range k.Keys {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// MaxRecipientsFile bounds a recipients file (the backup key Secret's
// recipients): an X25519 recipient is 62 bytes, so this holds hundreds.
const MaxRecipientsFile = 64 << 10

// ParseRecipients reads age recipients, one per line, '#' comments and
// blank lines skipped (age.ParseRecipients' rules, as `age -R` reads them).
// Its errors name lines, never their content: age's own quote the line,
// and what was pasted there may be an identity.
func ParseRecipients(data []byte) ([]age.Recipient, error) {
	if len(data) == 0 {
		return nil, errors.New("is empty")
	}
	if len(data) > MaxRecipientsFile {
		return nil, fmt.Errorf("is %d bytes, more than %d", len(data), MaxRecipientsFile)
	}
	rs, err := age.ParseRecipients(bytes.NewReader(data))
	if err == nil {
		return rs, nil
	}
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if _, err := age.ParseRecipients(strings.NewReader(line)); err != nil {
			return nil, fmt.Errorf("line %d is not an age recipient (age1...)", n+1)
		}
	}
	return nil, errors.New("holds no age recipient (age1...), only blank lines and # comments")
}

// Seal writes k, sealed to every recipient, to w.
func Seal(w io.Writer, k Keys, recipients ...age.Recipient) error {
	if err := k.Validate(); err != nil {
		return fmt.Errorf("sealing backup keys: %w", err)
	}
	if len(recipients) == 0 {
		return errors.New("sealing backup keys: no backup key recipient")
	}
	plain, err := json.Marshal(file{Format: Format, Keys: k})
	if err != nil {
		return err
	}
	aw, err := age.Encrypt(w, recipients...)
	if err != nil {
		return fmt.Errorf("sealing backup keys: %w", err)
	}
	if _, err := aw.Write(plain); err != nil {
		return fmt.Errorf("sealing backup keys: %w", err)
	}
	return aw.Close()
}

// Reasons Open and Check give, named for what is wrong. A restore's check
// passes them on as the reason of the TenantCluster's EtcdRestored
// condition (api/v1alpha1 lists them there; the controller adds how to
// supply what is missing).
const (
	// ReasonKeysMissing: no key file beside the snapshot.
	ReasonKeysMissing = "BackupKeysMissing"
	// ReasonBackupKeyWrong: the key file is not sealed to any identity given.
	ReasonBackupKeyWrong = "BackupKeyWrong"
	// ReasonKeysDamaged: the file is not an age file of this format, or is
	// larger than MaxFileSize, or its keys fail Validate.
	ReasonKeysDamaged = "BackupKeysDamaged"
	// ReasonKeysForAnotherSnapshot: the file's keys belong to another
	// snapshot (its sha256 differs).
	ReasonKeysForAnotherSnapshot = "BackupKeysForAnotherSnapshot"
	// ReasonSnapshotKeyUnknown: the snapshot holds values written with a
	// key the file does not have, or by a provider other than secretbox.
	ReasonSnapshotKeyUnknown = "SnapshotKeyUnknown"
	// ReasonSnapshotKeyWrong: a key of the file's name does not decrypt
	// the snapshot's values written with that name.
	ReasonSnapshotKeyWrong = "SnapshotKeyWrong"
)

// Provider is the encryption provider and version kubefarm's tenants write
// with, as the stored values' prefix spells it.
const Provider = "secretbox:v1"

// Sample is one value of the snapshot that an API server encrypted, with
// what its prefix names (etcdsnapshot.EncryptedValues reads them).
type Sample struct {
	// Object is the etcd key, for messages.
	Object string
	// Provider is the prefix's provider and version (Provider for
	// kubefarm's tenants); Key is the provider's key name.
	Provider string
	Key      string
	// Data follows the prefix: secretbox's 24-byte nonce, then the box.
	Data []byte
}

// Error is a refusal with its reason.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func refuse(reason string, format string, a ...any) error {
	return &Error{Reason: reason, Err: fmt.Errorf(format, a...)}
}

// Open reads a sealed key file with the given identities.
func Open(r io.Reader, identities ...age.Identity) (Keys, error) {
	sealed, err := io.ReadAll(io.LimitReader(r, MaxFileSize+1))
	if err != nil {
		return Keys{}, err
	}
	if len(sealed) > MaxFileSize {
		return Keys{}, refuse(ReasonKeysDamaged, "key file larger than %d bytes", MaxFileSize)
	}
	ar, err := age.Decrypt(bytes.NewReader(sealed), identities...)
	var noMatch *age.NoIdentityMatchError
	switch {
	case errors.As(err, &noMatch):
		return Keys{}, refuse(ReasonBackupKeyWrong, "the key file is sealed to another backup key")
	case err != nil:
		return Keys{}, refuse(ReasonKeysDamaged, "not an age file: %v", err)
	}
	plain, err := io.ReadAll(io.LimitReader(ar, MaxFileSize+1))
	if err != nil {
		return Keys{}, refuse(ReasonKeysDamaged, "reading the sealed keys: %v", err)
	}
	if len(plain) > MaxFileSize {
		return Keys{}, refuse(ReasonKeysDamaged, "sealed keys larger than %d bytes", MaxFileSize)
	}
	var f file
	dec := json.NewDecoder(bytes.NewReader(plain))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Keys{}, refuse(ReasonKeysDamaged, "sealed keys: %v", err)
	}
	if f.Format != Format {
		return Keys{}, refuse(ReasonKeysDamaged, "format %.60q, want %s", f.Format, Format)
	}
	if err := f.Keys.Validate(); err != nil {
		return Keys{}, refuse(ReasonKeysDamaged, "sealed keys: %v", err)
	}
	return f.Keys, nil
}

// Check is a restore's verdict on a key file before any member starts:
// the keys, or an *Error whose Reason says what is missing. sealed is nil
// when no key file was found; snapshotSHA256 is the snapshot file's hex
// sha256 (its integrity is etcdsnapshot.Verify's); samples are one
// encrypted value per key the snapshot's values name, each of which the
// file's key of that name must decrypt.
func Check(sealed io.Reader, snapshotSHA256 string, samples []Sample, identities ...age.Identity) (Keys, error) {
	if sealed == nil {
		return Keys{}, refuse(ReasonKeysMissing, "no key file beside the snapshot")
	}
	k, err := Open(sealed, identities...)
	if err != nil {
		return Keys{}, err
	}
	if k.SnapshotSHA256 != snapshotSHA256 {
		return Keys{}, refuse(ReasonKeysForAnotherSnapshot, "the keys are for snapshot sha256 %s, not %s", k.SnapshotSHA256, snapshotSHA256)
	}
	if err := k.Read(samples); err != nil {
		return Keys{}, err
	}
	return k, nil
}

// Read checks that k decrypts every sample: each names a key k has, which
// opens it. The backup job asks it of the keys it is about to seal (so a
// snapshot its keys cannot read fails the run instead of being kept as a
// backup), and a restore of the keys it opened.
func (k Keys) Read(samples []Sample) error {
	for _, s := range samples {
		if s.Provider != Provider {
			return refuse(ReasonSnapshotKeyUnknown, "%.200s was written by provider %.64q with key %.64q; kubefarm's tenants use %s", s.Object, s.Provider, s.Key, Provider)
		}
		key, ok := k.Keys[s.Key]
		if !ok {
			return refuse(ReasonSnapshotKeyUnknown, "%.200s was written with %.64q; the keys are %v", s.Object, s.Key, k.Names())
		}
		if !opens(key, s.Data) {
			return refuse(ReasonSnapshotKeyWrong, "the key %s does not decrypt %.200s, which was written with a key of that name", s.Key, s.Object)
		}
	}
	return nil
}

// opens tells whether key decrypts data as the API server's secretbox
// provider wrote it (nonce, then the box).
func opens(key, data []byte) bool {
	const nonceSize = 24
	if len(key) != KeySize || len(data) < nonceSize+secretbox.Overhead {
		return false
	}
	var nonce [nonceSize]byte
	var k [KeySize]byte
	copy(nonce[:], data)
	copy(k[:], key)
	_, ok := secretbox.Open(nil, data[nonceSize:], &nonce, &k)
	return ok
}

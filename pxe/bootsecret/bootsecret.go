// Package bootsecret is the per-boot secret that lets a booted machine, and
// nothing else on it, talk to kubefarm-pxe as that machine (docs/security.md).
//
// Nothing a pod on a node can read may authenticate the node: a pod shares
// the node's address (masquerade) and can read /proc/cmdline, the boot ID
// and the MACs. So kubefarm-pxe mints a random secret for each boot and
// hands it to the booting machine as a second initrd image (Archive), never
// in a URL or on the kernel command line. The node's initrd moves it to a
// root-only file (File), and kubefarm-agent sends it as a bearer token with
// every request: /config takes it once, /report and /heartbeat take it for
// the rest of the boot. kubefarm-pxe keeps only its SHA-256 (Hash), in
// memory and in the Machine's status.bootCredential, so that any replica,
// and a restarted one, can check a heartbeat.
//
// The package is pure: both ends import it.
package bootsecret

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/kubefarm/kubefarm/internal/newc"
)

// Size is the secret's length in bytes; it travels as 2*Size hex digits.
const Size = 32

// The secret's places on the node.
const (
	// ArchivePath is where the initrd finds it once the kernel has unpacked
	// the archive: a root-only directory of the initramfs.
	ArchivePath = "kubefarm/boot-secret"
	// File is where the initrd moves it before switching to the root
	// file system (a tmpfs under /run, mode 0600), where kubefarm-agent
	// reads it.
	File = "/run/kubefarm/boot-secret"
)

// Secret is one boot's secret in its wire form: 64 lower-case hex digits.
// It is a credential: never log it or put it into an error.
type Secret string

// Generate draws a new secret from r (crypto/rand when nil).
func Generate(r io.Reader) (Secret, error) {
	if r == nil {
		r = rand.Reader
	}
	b := make([]byte, Size)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", fmt.Errorf("drawing a boot secret: %w", err)
	}
	return Secret(hex.EncodeToString(b)), nil
}

// Parse checks the wire form (surrounding white space, as a file has it,
// is dropped). Its error never quotes the input.
func Parse(s string) (Secret, error) {
	s = strings.TrimSpace(s)
	if len(s) != 2*Size {
		return "", fmt.Errorf("a boot secret is %d hex digits, this has %d characters", 2*Size, len(s))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", errors.New("a boot secret is lower-case hex digits only")
		}
	}
	return Secret(s), nil
}

// Hash is what kubefarm-pxe keeps of a secret: "sha256:" and 64 hex digits.
// A secret has 256 random bits, so a plain hash is enough; no salt or
// stretching is needed to keep it from being guessed.
func (s Secret) Hash() string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Matches reports, in constant time, whether s is the secret of hash.
func (s Secret) Matches(hash string) bool {
	if s == "" || hash == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(s.Hash()), []byte(hash)) == 1
}

// Archive is the second initrd image that carries s to the booting
// machine: a gzip-compressed newc cpio with a root-only directory
// "kubefarm" and in it ArchivePath (mode 0600). The kernel unpacks it over
// the node image's own initrd (iPXE hands both over, one after the other).
//
// Compressed on purpose, tiny as it is: the kernel takes an uncompressed
// cpio only at a 4-byte aligned offset, and the x86 EFI stub, which loads
// the initrds by name under an iPXE without LoadFile2, concatenates them
// without padding. A compressed archive is recognised by its magic at any
// offset.
func Archive(s Secret) ([]byte, error) {
	if _, err := Parse(string(s)); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	w := newc.NewWriter(zw, 0)
	w.Add("kubefarm", newc.TypeDir|0o700, nil, 0, 0)
	w.Add(ArchivePath, newc.TypeRegular|0o600, []byte(string(s)+"\n"), 0, 0)
	if err := w.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// FromArchive reads the secret out of an Archive, as the kernel would
// unpack it; for tests and tools. Its errors never quote the input.
func FromArchive(archive []byte) (Secret, error) {
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		return "", errors.New("the boot secret archive is not gzip")
	}
	b, err := io.ReadAll(io.LimitReader(zr, 4096))
	if err != nil {
		return "", errors.New("the boot secret archive does not decompress")
	}
	for off := 0; off+110 <= len(b) && string(b[off:off+6]) == "070701"; {
		var f [13]uint64
		for i := range f {
			for _, c := range b[off+6+8*i : off+14+8*i] {
				f[i] <<= 4
				switch {
				case c >= '0' && c <= '9':
					f[i] |= uint64(c - '0')
				case c >= 'A' && c <= 'F':
					f[i] |= uint64(c - 'A' + 10)
				default:
					return "", errors.New("the boot secret archive has a malformed header")
				}
			}
		}
		size, namesize := int(f[6]), int(f[11])
		start := off + 110
		if namesize < 1 || start+namesize > len(b) {
			break
		}
		name := string(b[start : start+namesize-1])
		data := (start + namesize + 3) &^ 3
		if data+size > len(b) {
			break
		}
		if name == ArchivePath {
			return Parse(string(b[data : data+size]))
		}
		off = (data + size + 3) &^ 3
	}
	return "", fmt.Errorf("the boot secret archive has no %s", ArchivePath)
}

// scheme is the Authorization scheme the secret travels in.
const scheme = "Bearer "

// SetHeader puts s into req's Authorization header.
func SetHeader(req *http.Request, s Secret) { req.Header.Set("Authorization", scheme+string(s)) }

// FromRequest reads the secret of a request's Authorization header; false
// when there is none or it is not a well-formed secret.
func FromRequest(r *http.Request) (Secret, bool) {
	v := r.Header.Get("Authorization")
	if len(v) < len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
		return "", false
	}
	s, err := Parse(v[len(scheme):])
	if err != nil {
		return "", false
	}
	return s, true
}

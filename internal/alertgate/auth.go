package alertgate

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// The files of a source's credentials directory (--alert-source-auth
// name=DIR, a mounted Secret's keys); each is optional.
const (
	// AuthFileCA is the PEM CA bundle that verifies an https source,
	// instead of the system roots.
	AuthFileCA = "ca.crt"
	// AuthFileToken is a bearer token (kube-rbac-proxy, an OAuth proxy, a
	// hosted Prometheus-compatible service).
	AuthFileToken = "token"
	// AuthFileUsername and AuthFilePassword are HTTP basic authentication
	// (Prometheus' own web.config basic_auth_users).
	AuthFileUsername = "username"
	AuthFilePassword = "password"
)

// maxAuthFile bounds what is read of one credentials file.
const maxAuthFile = 64 << 10

// ParseAuth splits a --alert-source-auth value, name=DIR: DIR is an
// absolute path.
func ParseAuth(v string) (name, dir string, err error) {
	name, dir, ok := strings.Cut(v, "=")
	switch {
	case !ok:
		return "", "", fmt.Errorf("%q is not name=DIR", v)
	case !namePattern.MatchString(name):
		return "", "", fmt.Errorf("source name %q: lower-case letters, digits and '-', at most 63, starting and ending alphanumeric", name)
	case !filepath.IsAbs(dir):
		return "", "", fmt.Errorf("source %s: the credentials directory %q is not an absolute path", name, dir)
	}
	return name, filepath.Clean(dir), nil
}

// credentials are one source's: how requests authenticate. The secret
// files are read for each request, so a Secret updated in place (a
// rotated token) takes effect without a restart; which kind is used is
// decided once, at start.
type credentials struct {
	dir   string
	token bool // else basic, when username exists
	basic bool
}

// loadAuth reads dir for a source: the TLS configuration (its CA, when
// ca.crt exists) and the credentials the directory holds. Errors name the
// source and the file, never a file's content.
func loadAuth(name, dir string) (*tls.Config, credentials, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	cr := credentials{dir: dir}
	if info, err := os.Stat(dir); err != nil {
		return nil, cr, fmt.Errorf("source %s: the credentials directory %s: %w", name, dir, errors.Unwrap(err))
	} else if !info.IsDir() {
		return nil, cr, fmt.Errorf("source %s: the credentials directory %s is not a directory", name, dir)
	}
	if ca, err := readAuthFile(dir, AuthFileCA); err == nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, cr, fmt.Errorf("source %s: %s holds no PEM certificate", name, filepath.Join(dir, AuthFileCA))
		}
		tc.RootCAs = pool
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, cr, fmt.Errorf("source %s: %w", name, err)
	}
	has := func(f string) bool { _, err := os.Stat(filepath.Join(dir, f)); return err == nil }
	cr.token, cr.basic = has(AuthFileToken), has(AuthFileUsername)
	switch {
	case cr.token && cr.basic:
		return nil, cr, fmt.Errorf("source %s: %s has both %s and %s; give a bearer token or basic authentication, not both", name, dir, AuthFileToken, AuthFileUsername)
	case cr.basic && !has(AuthFilePassword):
		return nil, cr, fmt.Errorf("source %s: %s has %s but no %s", name, dir, AuthFileUsername, AuthFilePassword)
	case !cr.basic && has(AuthFilePassword):
		return nil, cr, fmt.Errorf("source %s: %s has %s but no %s", name, dir, AuthFilePassword, AuthFileUsername)
	}
	return tc, cr, nil
}

// readAuthFile reads one credentials file, bounded, surrounding blanks
// (a trailing newline) trimmed.
func readAuthFile(dir, name string) ([]byte, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAuthFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", filepath.Join(dir, name), err)
	}
	if len(b) > maxAuthFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", filepath.Join(dir, name), maxAuthFile)
	}
	return bytes.TrimSpace(b), nil
}

// authenticate sets the request's Authorization from the credentials'
// files, read now.
type authenticate struct {
	next http.RoundTripper
	cr   credentials
}

func (a authenticate) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	switch {
	case a.cr.token:
		tok, err := readAuthFile(a.cr.dir, AuthFileToken)
		if err != nil {
			return nil, err
		}
		r.Header.Set("Authorization", "Bearer "+string(tok))
	case a.cr.basic:
		user, err := readAuthFile(a.cr.dir, AuthFileUsername)
		if err != nil {
			return nil, err
		}
		pass, err := readAuthFile(a.cr.dir, AuthFilePassword)
		if err != nil {
			return nil, err
		}
		r.SetBasicAuth(string(user), string(pass))
	}
	return a.next.RoundTrip(r)
}

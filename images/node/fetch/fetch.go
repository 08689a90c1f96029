// Package fetch is the initrd's download step: it fetches the root file
// system over HTTP from kubefarm-pxe, checks its sha256 while writing it,
// and reports a failed boot to kubefarm-pxe's /report. It runs before the
// root file system exists, as a static binary next to busybox (whose wget
// is not used: busybox-static's name resolution goes through static
// glibc's NSS, which crashes in an initrd without a libc).
package fetch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/kubefarm/kubefarm/pxe/bootproto"
	"github.com/kubefarm/kubefarm/pxe/bootsecret"
)

// MismatchError is a download whose sha256 is not the one the kernel
// command line names.
type MismatchError struct {
	Want, Got string // hex
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("rootfs digest mismatch: want sha256:%s got sha256:%s", e.Want, e.Got)
}

// ParseDigest accepts sha256:<64 hex> or <64 hex> and returns the lower-case hex.
func ParseDigest(s string) (string, error) {
	h := strings.TrimPrefix(s, "sha256:")
	if len(h) != 64 {
		return "", fmt.Errorf("digest %q is not sha256:<64 hex>", s)
	}
	h = strings.ToLower(h)
	if _, err := hex.DecodeString(h); err != nil {
		return "", fmt.Errorf("digest %q is not sha256:<64 hex>", s)
	}
	return h, nil
}

// Fetch downloads url into path and checks its sha256 against want (hex).
// A short body (fewer bytes than Content-Length) is a transfer error, not a
// mismatch, so the caller may retry it; a mismatch is final. On any error
// path is removed.
func Fetch(ctx context.Context, c *http.Client, url, want, path string) (err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), resp.Body)
	if err != nil {
		return fmt.Errorf("GET %s: after %d bytes: %w", url, n, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return fmt.Errorf("GET %s: got %d of %d bytes", url, n, resp.ContentLength)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return &MismatchError{Want: want, Got: got}
	}
	return nil
}

// SendReport POSTs r to server/report (server is http://host[:port]) with
// the boot's secret, and fails unless the answer is 2xx.
func SendReport(ctx context.Context, c *http.Client, server string, secret bootsecret.Secret, r bootproto.BootReport) error {
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(server, "/")+"/report", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	bootsecret.SetHeader(req, secret)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST /report: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// Retry runs f up to attempts times, waiting wait, 2*wait, ... in between,
// and stops at the first success or MismatchError.
func Retry(attempts int, wait time.Duration, log func(error), f func() error) error {
	var err error
	for i := 0; i < attempts; i++ {
		if i > 0 {
			time.Sleep(wait << (i - 1))
		}
		if err = f(); err == nil {
			return nil
		}
		var mm *MismatchError
		if errors.As(err, &mm) {
			return err
		}
		log(err)
	}
	return err
}

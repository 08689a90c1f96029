package fetch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubefarm/kubefarm/pxe/bootproto"
	"github.com/kubefarm/kubefarm/pxe/bootsecret"
)

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestFetch(t *testing.T) {
	body := []byte(strings.Repeat("squashfs", 4096))
	short := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if short {
			// Announce the whole length, send half, drop the connection.
			w.Header().Set("Content-Length", "32768")
			w.Write(body[:len(body)/2])
			panic(http.ErrAbortHandler)
		}
		w.Write(body)
	}))
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "rootfs.squashfs")

	if err := Fetch(context.Background(), srv.Client(), srv.URL, hexSum(body), out); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); string(b) != string(body) {
		t.Fatal("downloaded bytes differ")
	}

	wrong := hexSum([]byte("another image"))
	err := Fetch(context.Background(), srv.Client(), srv.URL, wrong, out)
	var mm *MismatchError
	if !errors.As(err, &mm) {
		t.Fatalf("want a MismatchError, got %v", err)
	}
	if want := "rootfs digest mismatch: want sha256:" + wrong + " got sha256:" + hexSum(body); err.Error() != want {
		t.Errorf("message %q\nwant %q", err.Error(), want)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Error("a mismatching download is left on disk")
	}

	short = true
	err = Fetch(context.Background(), srv.Client(), srv.URL, hexSum(body), out)
	if err == nil || errors.As(err, &mm) {
		t.Fatalf("a short body must be a transfer error, got %v", err)
	}
}

func TestRetryStopsAtMismatch(t *testing.T) {
	n := 0
	err := Retry(5, time.Millisecond, func(error) {}, func() error {
		n++
		if n < 3 {
			return errors.New("connection reset")
		}
		return &MismatchError{Want: "a", Got: "b"}
	})
	var mm *MismatchError
	if !errors.As(err, &mm) || n != 3 {
		t.Fatalf("got %v after %d attempts, want the mismatch after 3", err, n)
	}
}

func TestParseDigest(t *testing.T) {
	h := hexSum(nil)
	for in, ok := range map[string]bool{"sha256:" + h: true, h: true, strings.ToUpper(h): true, "sha256:abc": false, "sha512:" + h: false, "": false} {
		got, err := ParseDigest(in)
		if (err == nil) != ok || (ok && got != h) {
			t.Errorf("ParseDigest(%q) = %q, %v", in, got, err)
		}
	}
}

// The report is bootproto.BootReport, the one /report takes, with its error field.
func TestSendReport(t *testing.T) {
	var got map[string]any
	secret, _ := bootsecret.Generate(nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s, ok := bootsecret.FromRequest(r); !ok || s != secret {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		if r.URL.Path != "/report" || r.Method != http.MethodPost {
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		json.NewDecoder(r.Body).Decode(&got)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	rep := bootproto.BootReport{MAC: "52:54:00:12:34:56", BootID: "0b6a3e5c-5c51-4d5c-9d2e-1c2f6a0a7e11", ImageDigest: "sha256:" + hexSum(nil), Error: "rootfs digest mismatch: want sha256:a got sha256:b"}
	if err := SendReport(context.Background(), srv.Client(), srv.URL, secret, rep); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"mac": rep.MAC, "bootID": rep.BootID, "imageDigest": rep.ImageDigest, "error": rep.Error} {
		if got[k] != v {
			t.Errorf("%s: got %v want %s", k, got[k], v)
		}
	}
	if err := SendReport(context.Background(), srv.Client(), srv.URL+"/elsewhere", secret, rep); err == nil {
		t.Error("a 404 must be an error")
	}
	if err := SendReport(context.Background(), srv.Client(), srv.URL, "", rep); err == nil {
		t.Error("a report without the boot's secret was accepted")
	}
}

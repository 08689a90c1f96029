package bootsecret_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/kubefarm/kubefarm/pxe/bootsecret"
)

func TestGenerateParseHash(t *testing.T) {
	a, err := bootsecret.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := bootsecret.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatal("two secrets are equal")
	}
	if len(a) != 2*bootsecret.Size {
		t.Fatalf("secret has %d characters", len(a))
	}
	if p, err := bootsecret.Parse(string(a) + "\n"); err != nil || p != a {
		t.Fatalf("Parse(secret+newline) = %q, %v", p, err)
	}
	if !a.Matches(a.Hash()) || a.Matches(b.Hash()) || a.Matches("") || bootsecret.Secret("").Matches(a.Hash()) {
		t.Fatal("Matches does not tell secrets apart")
	}
	if !strings.HasPrefix(a.Hash(), "sha256:") || len(a.Hash()) != 7+64 {
		t.Fatalf("hash %q", a.Hash())
	}
}

func TestParseRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"empty":      "",
		"short":      strings.Repeat("a", 63),
		"long":       strings.Repeat("a", 65),
		"upper":      strings.Repeat("A", 64),
		"not hex":    strings.Repeat("g", 64),
		"space in":   strings.Repeat("a", 32) + " " + strings.Repeat("a", 31),
		"nul":        strings.Repeat("a", 63) + "\x00",
		"multi-byte": strings.Repeat("a", 62) + "é",
	} {
		if _, err := bootsecret.Parse(in); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), in) && in != "" {
			t.Errorf("%s: error quotes the input: %v", name, err)
		}
	}
}

func TestGenerateFailsOnShortRandom(t *testing.T) {
	if _, err := bootsecret.Generate(bytes.NewReader(make([]byte, 5))); err == nil {
		t.Fatal("a short random source gave a secret")
	}
}

// The archive is what the kernel unpacks: gzip, then newc headers.
func TestArchive(t *testing.T) {
	s, _ := bootsecret.Generate(nil)
	b, err := bootsecret.Archive(s)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	type entry struct {
		name string
		mode uint64
		data string
	}
	var got []entry
	for off := 0; ; {
		if len(raw)-off < 110 || string(raw[off:off+6]) != "070701" {
			t.Fatalf("no newc header at %d", off)
		}
		field := func(i int) uint64 {
			v, err := strconv.ParseUint(string(raw[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		mode, size, namesize := field(1), int(field(6)), int(field(11))
		name := string(raw[off+110 : off+110+namesize-1])
		off += 110 + namesize
		off = (off + 3) &^ 3
		data := string(raw[off : off+size])
		off += size
		off = (off + 3) &^ 3
		if name == "TRAILER!!!" {
			if off != len(raw) {
				t.Fatalf("%d bytes after the trailer", len(raw)-off)
			}
			break
		}
		got = append(got, entry{name, mode, data})
	}
	want := []entry{
		{"kubefarm", 0o040700, ""},
		{bootsecret.ArchivePath, 0o100600, string(s) + "\n"},
	}
	if len(got) != len(want) {
		t.Fatalf("entries %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %o %q, want %o %q", i, got[i].mode, got[i].name, want[i].mode, want[i].name)
		}
	}
	if back, err := bootsecret.FromArchive(b); err != nil || back != s {
		t.Errorf("FromArchive = %v, want the secret", err)
	}
	// After a gzip member that ends at an odd offset, as the EFI stub
	// concatenates initrds, the archive is still found by its magic.
	if b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("the archive does not start with the gzip magic: % x", b[:2])
	}
	if _, err := bootsecret.Archive("not a secret"); err == nil {
		t.Error("archived a malformed secret")
	}
	for name, in := range map[string][]byte{"empty": nil, "not gzip": []byte("070701"), "no secret": gz(t, []byte("TRAILER"))} {
		if _, err := bootsecret.FromArchive(in); err == nil {
			t.Errorf("FromArchive(%s) gave a secret", name)
		}
	}
}

func gz(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestHeader(t *testing.T) {
	s, _ := bootsecret.Generate(nil)
	r := httptest.NewRequest("GET", "/config/x", io.NopCloser(strings.NewReader("")))
	if _, ok := bootsecret.FromRequest(r); ok {
		t.Fatal("a request without a header has a secret")
	}
	bootsecret.SetHeader(r, s)
	if got, ok := bootsecret.FromRequest(r); !ok || got != s {
		t.Fatalf("FromRequest = %q, %v", got, ok)
	}
	for _, h := range []string{"Basic " + string(s), "Bearer", "Bearer " + string(s)[:10], string(s)} {
		r.Header.Set("Authorization", h)
		if _, ok := bootsecret.FromRequest(r); ok {
			t.Errorf("header %q accepted", h[:min(len(h), 12)])
		}
	}
	r.Header.Set("Authorization", "bearer "+string(s))
	if _, ok := bootsecret.FromRequest(r); !ok {
		t.Error("the scheme is case-insensitive (RFC 9110)")
	}
}

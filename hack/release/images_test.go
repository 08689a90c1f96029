package release

import (
	"bytes"
	"debug/pe"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubefarm/kubefarm/pxe/bootfile"
	"github.com/kubefarm/kubefarm/pxe/server"
	"github.com/kubefarm/kubefarm/pxe/tftp"
)

// fakeEFI writes the smallest file debug/pe reads as a PE image for
// machine (a DOS header pointing at the PE signature and a COFF header, no
// sections), followed by marker, and returns its path.
func fakeEFI(t *testing.T, machine uint16, marker string) string {
	t.Helper()
	var b bytes.Buffer
	dos := make([]byte, 0x40)
	copy(dos, "MZ")
	binary.LittleEndian.PutUint32(dos[0x3c:], 0x40) // e_lfanew
	b.Write(dos)
	b.WriteString("PE\x00\x00")
	if err := binary.Write(&b, binary.LittleEndian, pe.FileHeader{Machine: machine}); err != nil {
		t.Fatal(err)
	}
	b.WriteString(marker)
	path := filepath.Join(t.TempDir(), bootfile.BinaryUEFIARM64)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// fakeDebianIPXE is a folder with the x86 binaries of Debian's ipxe
// package, as files of their own names.
func fakeDebianIPXE(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range []string{bootfile.BinaryBIOS, bootfile.BinaryUEFIx64, bootfile.BinarySNPOnly} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("debian "+n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestIPXEFiles: the kubefarm-pxe image's iPXE binaries all land where
// kubefarm-pxe serves TFTP from by default, the arm64 one from its build;
// a release (RequireARM64) fails without it, make images goes without it,
// and neither takes a file that is not an arm64 EFI image.
func TestIPXEFiles(t *testing.T) {
	if got := server.DefaultOptions().IPXEDir; got != IPXEDir {
		t.Fatalf("kubefarm-pxe serves %s by default, the image carries its iPXE binaries in %s", got, IPXEDir)
	}
	debian := fakeDebianIPXE(t)
	arm := fakeEFI(t, pe.IMAGE_FILE_MACHINE_ARM64, "arm64 build")
	files, err := IPXEFiles(IPXESources{Dir: debian, ARM64: arm, RequireARM64: true})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range files {
		got[f.Path] = f.Source
		if !f.HashContent || f.Mode != 0o644 {
			t.Errorf("%s: mode %o, hashed by content %v", f.Path, f.Mode, f.HashContent)
		}
	}
	want := map[string]string{}
	for _, n := range tftp.DefaultFiles {
		want[tftp.DefaultDir+"/"+n] = filepath.Join(debian, n)
	}
	want[tftp.DefaultDir+"/"+bootfile.BinaryUEFIARM64] = arm
	if len(got) != len(want) || len(files) != len(want) {
		t.Fatalf("files %v, want %v", got, want)
	}
	for p, src := range want {
		if got[p] != src {
			t.Errorf("%s from %q, want %q", p, got[p], src)
		}
	}

	missing := filepath.Join(t.TempDir(), "none.efi")
	files, err = IPXEFiles(IPXESources{Dir: debian, ARM64: missing})
	if err != nil || len(files) != len(want)-1 {
		t.Fatalf("optional arm64 iPXE missing: %d files, %v; want the x86 ones only", len(files), err)
	}
	for _, f := range files {
		if strings.HasSuffix(f.Path, "/"+bootfile.BinaryUEFIARM64) {
			t.Errorf("%s carried from %s, which does not exist", f.Path, f.Source)
		}
	}
	x86 := fakeEFI(t, pe.IMAGE_FILE_MACHINE_AMD64, "x86 build")
	notPE := filepath.Join(t.TempDir(), "ipxe-arm64.efi")
	if err := os.WriteFile(notPE, []byte("#!ipxe\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		src  IPXESources
		want string
	}{
		{"release without the arm64 iPXE", IPXESources{Dir: debian, ARM64: missing, RequireARM64: true}, "make ipxe-arm64"},
		{"release with no path", IPXESources{Dir: debian, RequireARM64: true}, "make ipxe-arm64"},
		{"an x86-64 PE image", IPXESources{Dir: debian, ARM64: x86}, "not arm64"},
		{"not a PE image", IPXESources{Dir: debian, ARM64: notPE}, "not an EFI (PE) image"},
		{"no Debian binaries", IPXESources{Dir: t.TempDir(), ARM64: arm}, "Debian package ipxe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := IPXEFiles(tc.src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

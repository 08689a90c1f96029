// Package bootparams reads what kubefarm-pxe and the initrd tell the agent:
// the kernel command line (pxe/httpboot.Script writes kubefarm.server= and
// kubefarm.image=; BOOTIF= when iPXE is told to add it), and the kernel's
// boot ID. Pure parsers; the caller reads the files.
package bootparams

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kubefarm/kubefarm/pxe/bootpaths"
)

// Params are the agent's arguments from the kernel command line.
type Params struct {
	// Server is kubefarm-pxe's base URL (kubefarm.server=): the replica that
	// served this boot's script, the only one with an open boot window.
	Server bootpaths.Base
	// Image is the root file system's digest (kubefarm.image=), which the
	// initrd has checked the download against.
	Image string
	// BootIF is the boot NIC's MAC from BOOTIF=, lower-case colon form, or
	// "" when the command line has none (kubefarm-pxe's script does not
	// add it; the initrd then records the NIC it used, see ReadBootIface).
	BootIF string
}

// Parse reads a kernel command line (/proc/cmdline). kubefarm.server and
// kubefarm.image are required; the last occurrence of an argument wins, as
// with the kernel's own parameters.
func Parse(cmdline string) (Params, error) {
	var p Params
	var server, bootif string
	for _, a := range strings.Fields(cmdline) {
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case "kubefarm.server":
			server = v
		case "kubefarm.image":
			p.Image = v
		case "BOOTIF":
			bootif = v
		}
	}
	if server == "" {
		return Params{}, errors.New("kernel command line: kubefarm.server= is missing (not booted by kubefarm-pxe?)")
	}
	base, err := bootpaths.ParseBase(server)
	if err != nil {
		return Params{}, fmt.Errorf("kernel command line: kubefarm.server: %w", err)
	}
	p.Server = base
	if !ValidDigest(p.Image) {
		return Params{}, fmt.Errorf("kernel command line: kubefarm.image=%q is not sha256:<64 lower-case hex>", p.Image)
	}
	if bootif != "" {
		if p.BootIF, err = ParseBootIF(bootif); err != nil {
			return Params{}, fmt.Errorf("kernel command line: BOOTIF=%q: %w", bootif, err)
		}
	}
	return p, nil
}

// ParseBootIF turns iPXE's BOOTIF value, 01-aa-bb-cc-dd-ee-ff (ARP hardware
// type 1, Ethernet, then the MAC), into aa:bb:cc:dd:ee:ff.
func ParseBootIF(v string) (string, error) {
	rest, ok := strings.CutPrefix(strings.ToLower(v), "01-")
	if !ok || len(rest) != 17 {
		return "", errors.New("want 01-aa-bb-cc-dd-ee-ff (an Ethernet MAC)")
	}
	return NormalizeMAC(rest)
}

// NormalizeMAC accepts a 6-byte MAC with ':' or '-' separators, any case,
// and returns it in the form the API and kubefarm-pxe's routes use.
func NormalizeMAC(s string) (string, error) {
	if len(s) != 17 {
		return "", fmt.Errorf("%q is not a 6-byte MAC address", s)
	}
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if i%3 == 2 {
			if c != ':' && c != '-' {
				return "", fmt.Errorf("%q is not a 6-byte MAC address", s)
			}
			b[i] = ':'
			continue
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", fmt.Errorf("%q is not a 6-byte MAC address", s)
		}
	}
	return string(b), nil
}

// ValidDigest reports whether d is sha256:<64 lower-case hex>.
func ValidDigest(d string) bool {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ParseBootID checks the content of /proc/sys/kernel/random/boot_id: a
// lower-case UUID, with the trailing newline the kernel writes.
func ParseBootID(content string) (string, error) {
	id := strings.TrimSpace(content)
	if len(id) != 36 {
		return "", fmt.Errorf("boot ID %q is not a UUID", id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return "", fmt.Errorf("boot ID %q is not a UUID", id)
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return "", fmt.Errorf("boot ID %q is not a lower-case UUID", id)
			}
		}
	}
	return id, nil
}

// ParseBootIface checks the content of the initrd's /run/kubefarm/bootif:
// the name of the interface it got its DHCP lease on.
func ParseBootIface(content string) (string, error) {
	name := strings.TrimSpace(content)
	if name == "" || len(name) > 15 || strings.ContainsAny(name, "/ \t\n\x00") || name == "." || name == ".." {
		return "", fmt.Errorf("boot interface %q is not an interface name", name)
	}
	return name, nil
}

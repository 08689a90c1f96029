package bootproto

// The kernel command line: what kubefarm-pxe's iPXE script tells the node's
// initrd and kubefarm-agent, and the files the kernel and the initrd leave
// for the agent. Pure parsers; the caller reads the files.

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kubefarm/kubefarm/pxe/bootpaths"
)

// The kernel command-line keys kubefarm-pxe's script writes (pxe/httpboot)
// and the node's initrd and agent read (images/node/initrd/init, Parse).
// The initrd's shell reads the same names; kubefarm.* is reserved, so a
// pool's kernel arguments cannot set them.
const (
	// KeyImage is the root filesystem's digest, sha256:<hex>.
	KeyImage = "kubefarm.image"
	// KeyRootfs is the root filesystem's URL.
	KeyRootfs = "kubefarm.rootfs"
	// KeyServer is the base URL of the kubefarm-pxe replica that served the
	// boot.
	KeyServer = "kubefarm.server"
	// KeyBootIF is pxelinux's and dracut's boot NIC, 01-<mac with '-'>,
	// filled in by iPXE.
	KeyBootIF = "BOOTIF"
	// ReservedPrefix starts every key of kubefarm's own.
	ReservedPrefix = "kubefarm."
)

// Params are the agent's arguments from the kernel command line.
type Params struct {
	// Server is kubefarm-pxe's base URL (kubefarm.server=): the replica that
	// issued this boot's secret, the only one that will answer /config.
	Server bootpaths.Base
	// Image is the root file system's digest (kubefarm.image=), which the
	// initrd has checked the download against.
	Image string
	// BootIF is the boot NIC's MAC from BOOTIF=, lower-case colon form, or
	// "" when the command line has none (kubefarm-pxe's script does not
	// add it; the initrd then records the NIC it used, see ReadBootIface).
	BootIF string
	// Mode is kubefarm.mode=: "" for a boot that joins its pool, or
	// ModeDiscover for the discovery boot of a machine no Machine claims
	// (discovery.go), which joins nothing and only reports its hardware.
	Mode string
}

// Parse reads a kernel command line (/proc/cmdline). kubefarm.server and
// kubefarm.image are required; the last occurrence of an argument wins, as
// with the kernel's own parameters. A kubefarm.mode= other than discover
// (an empty one too) is refused: an agent that does not know what its
// boot is for must not guess that it is to join.
func Parse(cmdline string) (Params, error) {
	var p Params
	var server, bootif string
	var modeSet bool
	for _, a := range strings.Fields(cmdline) {
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case KeyServer:
			server = v
		case KeyImage:
			p.Image = v
		case KeyBootIF:
			bootif = v
		case KeyMode:
			p.Mode, modeSet = v, true
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
	// Present and empty is refused too: the node image's units that a
	// joining node needs skip any boot whose command line names
	// kubefarm.mode (ConditionKernelCommandLine=!kubefarm.mode).
	if modeSet && p.Mode != ModeDiscover {
		return Params{}, fmt.Errorf("kernel command line: %s=%q is not a mode this agent knows (%q)", KeyMode, p.Mode, ModeDiscover)
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

// ParseBootID checks the content of /proc/sys/kernel/random/boot_id: a
// lower-case UUID, with the trailing newline the kernel writes.
func ParseBootID(content string) (string, error) {
	id := strings.TrimSpace(content)
	if !ValidBootID(id) {
		return "", fmt.Errorf("boot ID %q is not a lower-case UUID", id)
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

package httpboot

import (
	"errors"
	"fmt"
	"strings"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/machineconfig"
	"github.com/kubefarm/kubefarm/pxe/bootpaths"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
)

// MaxCmdline bounds the kernel command line iPXE passes on. x86's
// COMMAND_LINE_SIZE is 2048; a longer line is silently cut by the kernel,
// which could drop the kubefarm.* arguments at its end.
const MaxCmdline = 2048

// ValidateKernelArg checks one kernel argument before it goes into an iPXE
// script line. The script is a program: a newline would start a new iPXE
// command, whitespace would split the argument, '$' would be expanded as an
// iPXE setting (${...}), and a line starting with '#' is a comment. Only
// printable ASCII without those is let through.
func ValidateKernelArg(arg string) error {
	if arg == "" {
		return errors.New("empty kernel argument")
	}
	if len(arg) > 512 {
		return errors.New("kernel argument longer than 512 bytes")
	}
	if arg[0] == '#' {
		return fmt.Errorf("kernel argument %q starts with '#'", arg)
	}
	for i := 0; i < len(arg); i++ {
		c := arg[i]
		if c <= ' ' || c >= 0x7f {
			return fmt.Errorf("kernel argument %q has whitespace, a control or a non-ASCII byte", arg)
		}
		if c == '$' || c == '\\' || c == '"' || c == '\'' {
			return fmt.Errorf("kernel argument %q has %q, which iPXE would interpret", arg, c)
		}
	}
	// kubefarm.* are set by kubefarm-pxe and read by the node's boot hooks;
	// a pool or tag must not be able to point a node at another rootfs.
	if strings.HasPrefix(arg, bootproto.ReservedPrefix) {
		return fmt.Errorf("kernel argument %q: kubefarm.* arguments are reserved", arg)
	}
	// The script names the initrd itself (see initrdName); a second
	// initrd= would make the EFI stub open a file iPXE does not have.
	if strings.HasPrefix(arg, "initrd=") {
		return fmt.Errorf("kernel argument %q: initrd= is set by kubefarm-pxe", arg)
	}
	return nil
}

// initrdName is the name the script gives the initrd image in iPXE, and
// the initrd= argument on the kernel command line names it. Under UEFI an
// iPXE without LoadFile2 initrd support (before 1.21, e.g. Debian's 2019
// build) hands the kernel no initrd at all: the kernel's EFI stub loads it
// itself, by that name, from the file system iPXE exposes its images on.
// With LoadFile2 the stub takes the initrd from there and ignores
// initrd=. Under BIOS iPXE passes every fetched initrd through the Linux
// boot protocol, and the kernel ignores an initrd= it cannot parse as
// start,size (early_param "initrd" in init/do_mounts_initrd.c), so the
// argument is harmless there.
const initrdName = "initrd"

// secretName is the name of the second initrd image, the boot's secret
// (package bootsecret), named on the kernel command line for the same
// reason as initrdName. iPXE hands the kernel both images one after the
// other, and the kernel unpacks both cpio archives into its initramfs.
const secretName = "bootsecret"

// secretMAC is the booting NIC's MAC as iPXE expands it in the secret's
// URL, in the lower-case colon form the API stores. The script names no
// MAC of its own, so it stays the same whichever of the machine's NICs
// booted.
const secretMAC = "${netX/mac}"

// ImageFor names the BootImage to serve to a machine and the rootfs digest
// it must have ("" when not pinned).
//
// It is status.servedImage, not spec.desiredImage: the rollout controller
// moves servedImage one machine at a time (cordon, drain, flip, reboot), so
// a machine that reboots out of turn, e.g. after a crash, must come back on
// the image it ran, not jump ahead of the rollout. Only on first boot, before
// the controller has pinned anything, is desiredImage the right answer:
// there is no running image to preserve.
func ImageFor(m *kubefarmv1.Machine) (name, digest string) {
	if s := m.Status.ServedImage; s != nil && s.Name != "" {
		return s.Name, s.Digest
	}
	return m.Spec.DesiredImage, ""
}

// bootIfArg is the BOOTIF argument as pxelinux and dracut know it:
// "01-" (Ethernet) and the MAC with hyphens, filled in by iPXE.
const bootIfArg = bootproto.KeyBootIF + "=01-${netX/mac:hexhyp}"

// Script builds the iPXE script that boots machine m on image img. pool
// supplies the kernel arguments: the pool's, then those of its `all` tag and
// of the machine's tags in the order the machine lists them. baseURL is where
// this service answers (http://<server>[:port], no trailing slash); it is
// configuration, never the request's Host header, so a client cannot
// redirect other downloads.
func Script(m *kubefarmv1.Machine, img *kubefarmv1.BootImage, pool *kubefarmv1.NodePool, baseURL string) (string, error) {
	if m == nil || img == nil || pool == nil {
		return "", errors.New("machine, image and pool are required")
	}
	urls, err := bootpaths.ParseBase(baseURL)
	if err != nil {
		return "", err
	}
	name, pinned := ImageFor(m)
	if name != img.Name {
		return "", fmt.Errorf("image %q is not the machine's image %q", img.Name, name)
	}
	k, i, r := img.Spec.Kernel.Digest, img.Spec.Initrd.Digest, img.Spec.Rootfs.Digest
	for _, d := range []string{k, i, r} {
		if !bootproto.ValidDigest(d) {
			return "", fmt.Errorf("image %q: invalid digest %q", img.Name, d)
		}
	}
	if pinned != "" && pinned != r {
		// BootImages are immutable, so this means the pin and the image
		// disagree; booting either could be the wrong one.
		return "", fmt.Errorf("served image %q pins rootfs %s but the image has %s", name, pinned, r)
	}

	resolved, err := machineconfig.Resolve(pool, m.Spec.Tags)
	if err != nil {
		return "", err
	}
	args := resolved.KernelArgs
	for _, a := range args {
		if err := ValidateKernelArg(a); err != nil {
			return "", err
		}
	}
	args = append(args,
		"initrd="+initrdName,
		"initrd="+secretName,
		bootproto.KeyImage+"="+r,
		bootproto.KeyRootfs+"="+urls.Artifact(r),
		bootproto.KeyServer+"="+urls.String(),
		// iPXE expands this to the MAC of the NIC it booted from, so the
		// initrd brings up that interface (not whichever answers DHCP
		// first on a multi-NIC machine) and reports for the right MAC.
		// Set here, after the user arguments' check, which refuses "$".
		bootIfArg,
	)
	cmdline := strings.Join(args, " ")
	if len(cmdline) > MaxCmdline {
		return "", fmt.Errorf("kernel command line is %d bytes, over %d", len(cmdline), MaxCmdline)
	}

	var b strings.Builder
	b.WriteString("#!ipxe\n")
	b.WriteString(archCheck(img))
	b.WriteString("kernel " + urls.Artifact(k) + " " + cmdline + "\n")
	b.WriteString("initrd --name " + initrdName + " " + urls.Artifact(i) + "\n")
	b.WriteString("initrd --name " + secretName + " " + urls.Secret(secretMAC) + "\n")
	b.WriteString("boot\n")
	b.WriteString(archRefusal(img))
	return b.String(), nil
}

// wrongArchLabel is where the script goes when the machine's iPXE runs on
// another architecture than the image's kernel.
const wrongArchLabel = "kubefarm_wrong_arch"

// imageArch is the BootImage's architecture, amd64 when unset (the API's
// default).
func imageArch(img *kubefarmv1.BootImage) string {
	if img.Spec.Architecture == "" {
		return "amd64"
	}
	return img.Spec.Architecture
}

// archCheck compares iPXE's own ${buildarch} with the image's
// architecture before anything is fetched: an arm64 machine listed in a
// pool of amd64 images (or the reverse) would otherwise download a kernel
// it cannot run, and its boot's secret with it, and fail with no word of
// why. iPXE on a PC says i386 (undionly.kpxe is a 32-bit iPXE, which boots
// 64-bit kernels) or x86_64; on ARM, arm64 or arm32. An amd64 image refuses
// only the ARM names, so an iPXE too old to know ${buildarch} (empty)
// still boots the PCs it always booted; an arm64 image asks for arm64.
func archCheck(img *kubefarmv1.BootImage) string {
	if imageArch(img) == "arm64" {
		return "iseq ${buildarch} arm64 || goto " + wrongArchLabel + "\n"
	}
	return "iseq ${buildarch} arm64 && goto " + wrongArchLabel + " ||\n" +
		"iseq ${buildarch} arm32 && goto " + wrongArchLabel + " ||\n"
}

// archRefusal is the end of the script for a machine of the wrong
// architecture: it says so on the console and waits a minute before iPXE
// gives the machine back to its firmware, which retries its boot order,
// so a misplaced machine does not hammer the boot services. BootImage
// names are DNS labels: nothing in them is an iPXE setting.
func archRefusal(img *kubefarmv1.BootImage) string {
	return ":" + wrongArchLabel + "\n" +
		"echo kubefarm: BootImage " + img.Name + " is for " + imageArch(img) + ", this machine's iPXE is ${buildarch}: list it in a pool whose image matches\n" +
		"sleep 60\n" +
		"exit 1\n"
}

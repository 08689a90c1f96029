package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	nodeimage "github.com/kubefarm/kubefarm/images/node"
	"github.com/kubefarm/kubefarm/images/node/cni"
)

// FarmMachine is one qemu machine of the local farm, on a tap in the boot
// bridge. A reboot netboots again, which is how a rollout updates it.
type FarmMachine struct {
	Name, MAC, IP string
	// Index names its tap (<BootVethPrefix>-vm<Index>), which Down removes
	// with the other boot network links.
	Index int
	// UEFI boots it with OVMF: the firmware's own virtio-net driver and PXE
	// client (no option ROM), which ask for the x86-64 UEFI iPXE binary.
	// Otherwise SeaBIOS runs Debian's iPXE ROM for an e1000.
	UEFI bool
	// DiskSerial, when set, gives the machine a 1 GiB virtio disk with
	// this serial (qemu's null-co driver: no file, reads zeroes), for
	// discovery to report. Farm machines are diskless otherwise.
	DiskSerial string
	// SecondMAC, when set, gives the machine a second NIC (an e1000 with
	// no option ROM, so it never boots from it) on its own tap in the boot
	// bridge (SecondTap): a bond's second member, for hostNetwork.
	SecondMAC string
	// Arch is the machine's architecture: "" or amd64 for the PCs above,
	// arm64 for an aarch64 virt machine (qemu-system-aarch64, TCG) whose
	// UEFI firmware (Debian's qemu-efi-aarch64) netboots a virtio-net NIC
	// with no option ROM: DHCP client architecture 11, the arm64 iPXE.
	Arch string
}

// ARM64 says whether the machine is an aarch64 one.
func (m FarmMachine) ARM64() bool { return m.Arch == "arm64" }

// SecondTap is the tap of the machine's second NIC.
func (m FarmMachine) SecondTap() string { return m.Tap() + "b" }

// OVMF is the UEFI firmware of UEFI farm machines (Debian package ovmf).
const OVMF = "/usr/share/ovmf/OVMF.fd"

// AAVMF is the UEFI firmware of arm64 farm machines (Debian package
// qemu-efi-aarch64).
const AAVMF = "/usr/share/qemu-efi-aarch64/QEMU_EFI.fd"

// Tap is the machine's tap interface on the boot bridge.
func (m FarmMachine) Tap() string { return fmt.Sprintf("%s-vm%d", BootVethPrefix, m.Index) }

// Firmware says how the machine boots, for people reading the output.
func (m FarmMachine) Firmware() string {
	if m.ARM64() {
		return "arm64 UEFI (AAVMF, virtio-net)"
	}
	if m.UEFI {
		return "UEFI (OVMF, virtio-net)"
	}
	return "BIOS (SeaBIOS, e1000 iPXE ROM)"
}

// QemuMemoryMiB is a farm machine's memory: it holds the node image's root
// filesystem in RAM.
const QemuMemoryMiB = 3072

// QemuArgs is the machine's qemu command line, console written to console:
// TCG (no KVM on these hosts), one CPU, no disk, the network first and
// only. The memory holds the node image's root filesystem in RAM.
func QemuArgs(m FarmMachine, console string) []string {
	common := []string{"-m", fmt.Sprint(QemuMemoryMiB), "-smp", "1",
		"-display", "none", "-monitor", "none", "-serial", "file:" + console,
		"-netdev", "tap,id=n0,ifname=" + m.Tap() + ",script=no,downscript=no"}
	if m.ARM64() {
		// A Cortex-A72 rather than -cpu max: max's pointer authentication
		// is emulated slowly under TCG, and the node image needs nothing
		// newer than ARMv8.0.
		args := append([]string{"qemu-system-aarch64", "-machine", "virt,accel=tcg", "-cpu", "cortex-a72"}, common...)
		return append(args, "-bios", AAVMF, "-device", "virtio-net-pci,netdev=n0,mac="+m.MAC+",romfile=")
	}
	args := append([]string{"qemu-system-x86_64", "-machine", "pc,accel=tcg"}, common...)
	if m.SecondMAC != "" {
		// QMP's set_link n1 off pulls its cable.
		args = append(args, "-netdev", "tap,id=n1,ifname="+m.SecondTap()+",script=no,downscript=no",
			"-device", "e1000,netdev=n1,mac="+m.SecondMAC+",romfile=")
	}
	if m.DiskSerial != "" {
		args = append(args, "-blockdev", "null-co,node-name=disk0,size=1073741824,read-zeroes=on",
			"-device", "virtio-blk-pci,drive=disk0,serial="+m.DiskSerial)
	}
	if m.UEFI {
		// romfile= keeps qemu's iPXE option ROM off the NIC, so the
		// firmware's own PXE client asks for the boot file as UEFI.
		return append(args, "-bios", OVMF, "-device", "virtio-net-pci,netdev=n0,mac="+m.MAC+",romfile=")
	}
	return append(args, "-device", "e1000,netdev=n0,mac="+m.MAC, "-boot", "n")
}

// UEFIAvailable tells whether UEFI machines can run here (OVMF installed).
func UEFIAvailable() bool {
	_, err := os.Stat(OVMF)
	return err == nil
}

func (m FarmMachine) process() string { return "qemu-" + m.Name }

// Console is the file the machine's serial console is written to.
func (c *Cluster) Console(m FarmMachine) string { return c.path("logs", "console-"+m.Name+".log") }

// PowerOn starts the machine as a component of the cluster: it outlives the
// command that started it and Down stops it.
func (c *Cluster) PowerOn(m FarmMachine) error {
	if _, ok := c.running(m.process()); ok {
		return nil
	}
	if err := AddTap(m.Tap(), c.BootBridge); err != nil {
		return err
	}
	if m.SecondMAC != "" {
		if err := AddTap(m.SecondTap(), c.BootBridge); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(c.path("logs"), 0o755); err != nil {
		return err
	}
	return c.start(m.process(), QemuArgs(m, c.Console(m)))
}

// BootMTU is the boot bridge's MTU and its taps': jumbo frames pass, and a
// guest that keeps 1500 is unaffected.
const BootMTU = 9000

// AddTap makes tap, a tap interface of BootMTU enslaved to bridge and up,
// replacing one a killed run left behind (`ip tuntap add` refuses an
// existing name).
func AddTap(tap, bridge string) error {
	_ = exec.Command("ip", "link", "del", tap).Run()
	for _, args := range [][]string{
		{"tuntap", "add", "dev", tap, "mode", "tap"},
		{"link", "set", tap, "mtu", fmt.Sprint(BootMTU)},
		{"link", "set", tap, "master", bridge},
		{"link", "set", tap, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// powerOffAll stops every farm machine the cluster started.
func (c *Cluster) powerOffAll() {
	pids, _ := filepath.Glob(c.path("run", "qemu-*.pid"))
	for _, p := range pids {
		c.stop(strings.TrimSuffix(filepath.Base(p), ".pid"), 10*time.Second)
	}
	// A Redfish machine is a libvirt domain (internal/testing/sushy): its
	// qemu is libvirtd's child, and outlives a test process that was killed.
	for _, pid := range processesMentioning("guest=kubefarm-sushy-") {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// VariantImage writes into out a node image that is dir's with one file
// (kubefarm-variant, the time) appended to the root filesystem's top
// directory by mksquashfs (a single source directory's contents go to the
// root): another rootfs digest, the same kernel and initrd (linked),
// and a manifest that says so. A rollout to it is a real reboot into a
// different image without a second image build.
func VariantImage(dir, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, f := range []string{nodeimage.Vmlinuz, nodeimage.Initrd} {
		_ = os.Remove(filepath.Join(out, f))
		if err := os.Symlink(filepath.Join(dir, f), filepath.Join(out, f)); err != nil {
			return err
		}
	}
	rootfs := filepath.Join(out, nodeimage.Rootfs)
	if out, err := exec.Command("cp", "--reflink=auto", filepath.Join(dir, nodeimage.Rootfs), rootfs).CombinedOutput(); err != nil {
		return fmt.Errorf("copying the rootfs: %v: %s", err, out)
	}
	extra, err := os.MkdirTemp("", "kubefarm-variant-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(extra)
	if err := os.MkdirAll(filepath.Join(extra, "etc"), 0o755); err != nil {
		return err
	}
	stamp := []byte(time.Now().UTC().Format(time.RFC3339Nano) + "\n")
	if err := os.WriteFile(filepath.Join(extra, "etc", "kubefarm-variant"), stamp, 0o644); err != nil {
		return err
	}
	if out, err := exec.Command("mksquashfs", filepath.Join(extra, "etc"), rootfs, "-no-progress", "-quiet").CombinedOutput(); err != nil {
		return fmt.Errorf("appending to the rootfs: %v: %s", err, out)
	}
	m, err := nodeimage.ReadManifest(dir)
	if err != nil {
		return err
	}
	sum, size, err := cni.FileSHA256(rootfs)
	if err != nil {
		return err
	}
	m.Artifacts[nodeimage.Rootfs] = nodeimage.File{SHA256: sum, Size: size}
	return nodeimage.WriteManifest(out, m)
}

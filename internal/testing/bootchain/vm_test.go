package bootchain

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kubefarm/kubefarm/internal/testing/netnstest"
	"github.com/kubefarm/kubefarm/pxe/bootfile"
)

// The machines' firmware.
const (
	ovmf = "/usr/share/ovmf/OVMF.fd"
	// aavmf is EDK2's firmware for qemu's arm64 virt board
	// (qemu-efi-aarch64).
	aavmf = "/usr/share/qemu-efi-aarch64/QEMU_EFI.fd"
)

// vm is one virtual machine of the test and how it boots.
type vm struct {
	name, mac, ip string
	uefi          bool
	// arch is the machine's Debian architecture: amd64 runs in
	// qemu-system-x86_64, arm64 (always UEFI) on qemu-system-aarch64's
	// virt board.
	arch string
}

var (
	biosVM = vm{name: "bios", mac: "52:54:00:77:00:11", ip: "10.77.0.11", arch: "amd64"}
	uefiVM = vm{name: "uefi", mac: "52:54:00:77:00:12", ip: "10.77.0.12", uefi: true, arch: "amd64"}
	// misplacedVM is an x86 UEFI machine listed in a pool of arm64 images.
	misplacedVM = vm{name: "misplaced", mac: "52:54:00:77:00:13", ip: "10.77.0.13", uefi: true, arch: "amd64"}
)

// firmwareArch is the DHCP client architecture (option 93) v's UEFI
// firmware sends: OVMF says 7 (EFI byte code, what x86-64 firmware sends in
// practice), EDK2 on arm64 11.
func (v vm) firmwareArch() int {
	if v.arch == "arm64" {
		return int(bootfile.ArchEFIARM64)
	}
	return int(bootfile.ArchEFIBC)
}

// bootFile is the iPXE binary kubefarm-pxe sends v's UEFI firmware to.
func (v vm) bootFile() string {
	if v.arch == "arm64" {
		return bootfile.BinaryUEFIARM64
	}
	return bootfile.BinaryUEFIx64
}

// bootTimeout bounds v's boot from power-on to its report: TCG emulates
// another instruction set for the arm64 machine, several times slower.
func (v vm) bootTimeout() time.Duration {
	if v.arch == "arm64" {
		return 10 * time.Minute
	}
	return 4 * time.Minute
}

// qemu is v's emulator and its machine, firmware and NIC (on netdev n0).
func (v vm) qemu() (string, []string) {
	switch {
	case v.arch == "arm64":
		// The virt board's EDK2 drives the virtio-net NIC and does PXE
		// itself (no option ROM), as an ARM server's firmware does.
		// bootindex puts the NIC first: -boot is the PC firmware's.
		return "qemu-system-aarch64", []string{"-machine", "virt,accel=tcg", "-cpu", "cortex-a57", "-m", "512", "-smp", "1",
			"-bios", aavmf, "-device", "virtio-net-pci,netdev=n0,mac=" + v.mac + ",romfile=,bootindex=0"}
	case v.uefi:
		// No option ROM: OVMF's own virtio-net driver and PXE do the
		// firmware's part, as a UEFI server's firmware would.
		return "qemu-system-x86_64", []string{"-machine", "pc,accel=tcg", "-m", "512", "-smp", "1", "-boot", "n",
			"-bios", ovmf, "-device", "virtio-net-pci,netdev=n0,mac=" + v.mac + ",romfile="}
	default:
		// SeaBIOS runs Debian's iPXE ROM for the e1000 (ipxe-qemu).
		return "qemu-system-x86_64", []string{"-machine", "pc,accel=tcg", "-m", "512", "-smp", "1", "-boot", "n",
			"-device", "e1000,netdev=n0,mac=" + v.mac}
	}
}

// requireFacility stops the test when this machine cannot run arch's
// machines. The x86 test is part of go test ./...: without root or qemu it
// skips, loudly (make test fails on a skip). The arm64 one runs only when
// asked for (make test-arm64, which installs what it needs): nothing
// missing may skip it. Everything else missing is a failure.
func requireFacility(t *testing.T, arch string) {
	t.Helper()
	stop := func(msg string) {
		t.Helper()
		if arch == "amd64" {
			t.Skip("SKIPPED, NOT PASSED: " + msg)
		}
		t.Fatal(msg)
	}
	emulator, install := "qemu-system-x86_64", "apt-get install -y qemu-system-x86 ipxe-qemu ovmf"
	files := []string{"/usr/lib/ipxe/qemu/efi-e1000.rom", ovmf, DefaultBusybox}
	if arch == "arm64" {
		emulator, install = "qemu-system-aarch64", "make test-arm64 installs qemu-system-arm and qemu-efi-aarch64"
		files = []string{aavmf}
	}
	if os.Geteuid() != 0 {
		stop("the boot chain test needs root (network namespaces, tap devices)")
	}
	if _, err := exec.LookPath(emulator); err != nil {
		stop(emulator + " is not installed (" + install + ")")
	}
	for _, f := range append(files, filepath.Join(ipxeDir, bootfile.BinaryUEFIx64)) {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s is missing (%s; the Debian packages ipxe and busybox-static)", f, install)
		}
	}
	if arch == "amd64" {
		if err := CheckStatic(DefaultBusybox); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Fatalf("/dev/net/tun: %v", err)
	}
}

// runningVM is a qemu machine of the test: its serial console's and its
// NIC capture's files, and qemu's exit.
type runningVM struct {
	console, capture string
	exit             chan error
	done             bool // exit has been received
	process          *os.Process
}

// stop powers the machine off (kills qemu) and waits for it.
func (r *runningVM) stop() {
	if !r.done {
		_ = r.process.Kill()
		<-r.exit
		r.done = true
	}
}

// startVM powers v on in qemu, its NIC on a new tap of the boot bridge,
// network boot first and no reboot. The machine is killed when the test
// ends; a failed test keeps its console and packet capture.
func (c *chain) startVM(t *testing.T, v vm) *runningVM {
	t.Helper()
	dir := t.TempDir()
	console, capture := filepath.Join(dir, "console.log"), filepath.Join(dir, "nic.pcap")
	hw, _ := net.ParseMAC(v.mac)
	tap := "kftap-" + v.name
	netnstest.Run(t, "ip", "-n", c.ns, "tuntap", "add", "dev", tap, "mode", "tap")
	netnstest.Run(t, "ip", "-n", c.ns, "link", "set", tap, "master", bridge)
	netnstest.Run(t, "ip", "-n", c.ns, "link", "set", tap, "up")

	emulator, machine := v.qemu()
	args := append(machine,
		"-display", "none", "-monitor", "none", "-serial", "file:"+console,
		// vnet_hdr=off: the capture then holds plain Ethernet frames.
		"-netdev", "tap,id=n0,ifname="+tap+",script=no,downscript=no,vnet_hdr=off",
		"-object", "filter-dump,id=d0,netdev=n0,file="+capture,
		"-no-reboot",
	)
	var qemuOut netnstest.LockedBuffer
	q := exec.Command("ip", append([]string{"netns", "exec", c.ns, emulator}, args...)...)
	q.Stdout, q.Stderr = &qemuOut, &qemuOut
	if err := q.Start(); err != nil {
		t.Fatal(err)
	}
	qexit := make(chan error, 1)
	go func() { qexit <- q.Wait() }()
	run := &runningVM{console: console, capture: capture, exit: qexit, process: q.Process}
	t.Cleanup(func() {
		if !run.done {
			_ = q.Process.Kill()
			<-qexit
		}
		if t.Failed() {
			if keep, err := os.MkdirTemp("", "kubefarm-bootchain-"+v.name+"-"); err == nil {
				_ = copyFile(console, filepath.Join(keep, "console.log"))
				_ = copyFile(capture, filepath.Join(keep, "nic.pcap"))
				t.Logf("kept the console log and the NIC's packet capture in %s", keep)
			}
			b, _ := os.ReadFile(console)
			t.Logf("serial console of %s:\n%s", v.name, tail(string(b), 150))
			if tr, err := readPcap(capture, hw); err == nil {
				t.Logf("packets of %s:\n%s", v.name, tr)
			} else {
				t.Logf("packet capture: %v", err)
			}
			t.Logf("qemu output: %s", qemuOut.String())
		}
	})
	return run
}

// Package facts reads a machine's hardware as Linux shows it, for
// kubefarm-agent's discovery mode (docs/agent.md): DMI's system fields,
// the CPU model and count, the memory, the whole disks and the physical
// NICs. Every reader takes the root of the file system it reads ("/" on a
// node; a fixture tree in tests) and reads files only.
//
// What it returns always fits the DiscoveredMachine type's bounds
// (api/v1alpha1, checked again by bootproto's DiscoveryReport.Validate):
// kubefarm-pxe refuses a report with an over-long or unprintable field, or
// too many disks or NICs, as a whole, so a machine with a long model
// string or a hundred disks would never be discovered if the agent sent
// them as they are. Strings are trimmed, made printable and cut to their
// maximum; lists are cut to their MaxItems. A value the host does not
// expose, or does not expose readably, is left empty rather than guessed.
package facts

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
)

// maxFile bounds what is read of one file: sysfs attributes are a page at
// most, and /proc/cpuinfo is about 1.5 KiB a CPU.
const (
	maxFile    = 4096
	maxCPUInfo = 8 << 20
	maxMemInfo = 64 << 10
)

// Read reads every fact under root but the BMC's address (BMCAddress,
// which talks to a device).
func Read(root string) v1alpha1.HardwareFacts {
	cpu := CPU(root)
	mem := MemoryBytes(root)
	return v1alpha1.HardwareFacts{
		System:      System(root),
		CPU:         cpu,
		MemoryBytes: mem,
		MemoryMiB:   mem >> 20,
		Disks:       Disks(root),
		NICs:        NICs(root),
	}
}

// System reads DMI's system fields from /sys/class/dmi/id. The serial and
// the UUID are readable by root only (the agent is root); a machine
// without DMI (most arm64 boards, some VMs) has none of them.
func System(root string) v1alpha1.SystemFacts {
	dmi := filepath.Join(root, "sys/class/dmi/id")
	return v1alpha1.SystemFacts{
		Vendor:  Clean(readAttr(filepath.Join(dmi, "sys_vendor")), bootproto.MaxDiscoveryText),
		Product: Clean(readAttr(filepath.Join(dmi, "product_name")), bootproto.MaxDiscoveryText),
		Serial:  Clean(readAttr(filepath.Join(dmi, "product_serial")), bootproto.MaxDiscoveryText),
		UUID:    Clean(readAttr(filepath.Join(dmi, "product_uuid")), bootproto.MaxDiscoveryUUID),
	}
}

// CPU reads /proc/cpuinfo: the count of "processor" entries (logical CPUs
// online at boot) and the model. x86 names it on "model name"; arm64's
// kernel does not, and says only "CPU implementer" and "CPU part", which
// become "<implementer> part <part>" (the implementer named when it is a
// known one).
func CPU(root string) v1alpha1.CPUFacts {
	b, err := readFile(filepath.Join(root, "proc/cpuinfo"), maxCPUInfo)
	if err != nil {
		return v1alpha1.CPUFacts{}
	}
	var count int64
	var model, implementer, part string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "processor":
			// s390's "processor 0: ..." lines are not x86's and arm64's
			// "processor : 0"; only a number counts.
			if _, err := strconv.Atoi(v); err == nil {
				count++
			}
		case "model name":
			if model == "" {
				model = v
			}
		case "CPU implementer":
			if implementer == "" {
				implementer = v
			}
		case "CPU part":
			if part == "" {
				part = v
			}
		}
	}
	if model == "" && implementer != "" {
		name := implementer
		if n, ok := armImplementers[strings.ToLower(implementer)]; ok {
			name = n
		}
		model = name
		if part != "" {
			model += " part " + part
		}
	}
	return v1alpha1.CPUFacts{Model: Clean(model, bootproto.MaxDiscoveryText), Count: int32(min(count, bootproto.MaxDiscoveryCPUs))}
}

// armImplementers names the "CPU implementer" codes of the arm64 server
// and board CPUs one meets (the kernel's arch/arm64/include/asm/cputype.h).
var armImplementers = map[string]string{
	"0x41": "ARM", "0x42": "Broadcom", "0x43": "Cavium", "0x46": "Fujitsu", "0x48": "HiSilicon",
	"0x4e": "NVIDIA", "0x50": "APM", "0x51": "Qualcomm", "0x61": "Apple", "0x6d": "Microsoft",
	"0xc0": "Ampere",
}

// MemoryBytes reads MemTotal from /proc/meminfo (the kernel writes kB,
// which are KiB): the memory the kernel manages, a little less than what
// is installed. 0 when it cannot be read.
func MemoryBytes(root string) int64 {
	b, err := readFile(filepath.Join(root, "proc/meminfo"), maxMemInfo)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(line, "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			return 0
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 || kb > (1<<62)/1024 {
			return 0
		}
		if len(f) > 1 && f[1] != "kB" {
			return 0
		}
		return kb * 1024
	}
	return 0
}

// notDisks are the kernel's block devices that are no disk: loop and ram
// disks, zram, device mapper and md arrays, network block devices, optical
// drives and floppies.
var notDisks = []string{"loop", "ram", "zram", "dm-", "md", "nbd", "sr", "fd"}

// Disks reads the whole disks in /sys/block, in name order: devices that
// are backed by hardware (a device link), not partitions, not hidden (the
// per-path devices of NVMe multipath), and not one of notDisks. Size from
// size (512-byte sectors, whatever the disk's block size); model and
// serial from the device (SCSI and SATA: device/model and device/vpd_pg80,
// the unit serial number page; NVMe: the controller's model and serial;
// virtio: the disk's serial, which is all virtio-blk has); rotational from
// queue/rotational.
func Disks(root string) []v1alpha1.DiskFacts {
	dir := filepath.Join(root, "sys/block")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []v1alpha1.DiskFacts
	for _, e := range entries {
		if len(out) == bootproto.MaxDiscoveryDisks {
			break
		}
		name := e.Name()
		if skipDisk(name) {
			continue
		}
		d := filepath.Join(dir, name)
		if !exists(filepath.Join(d, "device")) || exists(filepath.Join(d, "partition")) || readAttr(filepath.Join(d, "hidden")) == "1" {
			continue
		}
		disk := v1alpha1.DiskFacts{Name: Clean(name, bootproto.MaxDiscoveryDevice)}
		if disk.Name == "" {
			continue
		}
		if sectors, err := strconv.ParseInt(readAttr(filepath.Join(d, "size")), 10, 64); err == nil && sectors > 0 && sectors <= (1<<62)/512 {
			disk.SizeBytes = sectors * 512
		}
		disk.Model = Clean(readAttr(filepath.Join(d, "device/model")), bootproto.MaxDiscoveryText)
		disk.Serial = Clean(diskSerial(d), bootproto.MaxDiscoveryText)
		disk.Rotational = readAttr(filepath.Join(d, "queue/rotational")) == "1"
		out = append(out, disk)
	}
	return out
}

func skipDisk(name string) bool {
	for _, p := range notDisks {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// diskSerial: the device's serial attribute (NVMe's controller, some SCSI
// drivers), the unit serial number VPD page (SCSI and SATA through libata),
// or the disk's own serial (virtio-blk).
func diskSerial(d string) string {
	if s := readAttr(filepath.Join(d, "device/serial")); s != "" {
		return s
	}
	if b, err := readFile(filepath.Join(d, "device/vpd_pg80"), maxFile); err == nil {
		if s := vpdSerial(b); s != "" {
			return s
		}
	}
	return readAttr(filepath.Join(d, "serial"))
}

// vpdSerial decodes SCSI's Unit Serial Number VPD page (0x80): a 4-byte
// header (peripheral, page code, big-endian page length), then the serial
// in ASCII, often padded with spaces.
func vpdSerial(b []byte) string {
	if len(b) < 4 || b[1] != 0x80 {
		return ""
	}
	n := int(b[2])<<8 | int(b[3])
	body := b[4:]
	if n < len(body) {
		body = body[:n]
	}
	return string(body)
}

// NICs reads the physical network interfaces in /sys/class/net, in name
// order: those with a device link (loopback, bridges, veths, bonds, VLANs,
// tunnels have none) and an Ethernet-sized MAC (address). Driver is the
// name of the device's driver link; speed is speed in Mb/s, 0 when the
// kernel says -1 or refuses to say (a link that is down); link is carrier.
func NICs(root string) []v1alpha1.NICFacts {
	dir := filepath.Join(root, "sys/class/net")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []v1alpha1.NICFacts
	for _, e := range entries {
		if len(out) == bootproto.MaxDiscoveryNICs {
			break
		}
		n := filepath.Join(dir, e.Name())
		if !exists(filepath.Join(n, "device")) {
			continue
		}
		mac, err := bootproto.NormalizeMAC(readAttr(filepath.Join(n, "address")))
		if err != nil {
			continue // InfiniBand's 20-byte addresses, or none
		}
		nic := v1alpha1.NICFacts{MAC: mac, Name: Clean(e.Name(), bootproto.MaxDiscoveryDevice)}
		if target, err := os.Readlink(filepath.Join(n, "device/driver")); err == nil {
			nic.Driver = Clean(filepath.Base(target), bootproto.MaxDiscoveryDriver)
		}
		if s, err := strconv.ParseInt(readAttr(filepath.Join(n, "speed")), 10, 32); err == nil && s > 0 {
			nic.SpeedMbps = int32(s)
		}
		nic.Link = readAttr(filepath.Join(n, "carrier")) == "1"
		out = append(out, nic)
	}
	return out
}

// Clean makes s what the API accepts: valid UTF-8 (an invalid byte, or a
// U+FFFD, becomes '?'), printable (a control or other unprintable
// character becomes a space), without leading or trailing space, and at
// most max bytes, cut on a character boundary.
func Clean(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r == utf8.RuneError:
			return '?'
		case !unicode.IsPrint(r):
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	s = strings.TrimSpace(s)
	if len(s) > max {
		n := max
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = strings.TrimSpace(s[:n])
	}
	return s
}

// readAttr reads a sysfs attribute, trimmed; "" when it cannot be read
// (absent, or an attribute the driver refuses, as speed on a down link).
func readAttr(path string) string {
	b, err := readFile(path, maxFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// readFile reads at most max bytes of a file.
func readFile(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max))
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

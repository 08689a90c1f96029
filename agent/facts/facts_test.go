package facts

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
)

// tree is a fixture root: a path and its content, or "-> target" for a
// symlink (sysfs' device and driver links).
type tree map[string]string

func (tr tree) write(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range tr {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "-> "); ok {
			if err := os.Symlink(target, full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// merge is the union of fixture parts.
func merge(parts ...tree) tree {
	out := tree{}
	for _, p := range parts {
		for k, v := range p {
			out[k] = v
		}
	}
	return out
}

const x86CPUInfo = `processor	: 0
vendor_id	: GenuineIntel
model name	: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz
flags		: fpu vme de pse

processor	: 1
vendor_id	: GenuineIntel
model name	: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz
flags		: fpu vme de pse

`

const arm64CPUInfo = `processor	: 0
BogoMIPS	: 50.00
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics
CPU implementer	: 0x41
CPU architecture: 8
CPU variant	: 0x1
CPU part	: 0xd0c
CPU revision	: 1

processor	: 1
BogoMIPS	: 50.00
CPU implementer	: 0x41
CPU part	: 0xd0c

processor	: 2
CPU implementer	: 0x41
CPU part	: 0xd0c

processor	: 3
CPU implementer	: 0x41
CPU part	: 0xd0c
`

const meminfo = "MemTotal:        4028232 kB\nMemFree:         3500000 kB\n"

// nic is a physical NIC's sysfs entry; speed "" leaves the file out (a
// driver that refuses it), as reading it on a down link does.
func nic(name, mac, driver, speed, carrier string) tree {
	d := "sys/class/net/" + name + "/"
	tr := tree{
		d + "address":           mac + "\n",
		d + "carrier":           carrier + "\n",
		d + "device/driver":     "-> ../../../bus/pci/drivers/" + driver,
		d + "device/vendor":     "0x8086\n",
		d + "type":              "1\n",
		d + "addr_assign_type":  "0\n",
		d + "device/subsystem/": "",
	}
	if speed != "" {
		tr[d+"speed"] = speed + "\n"
	}
	return tr
}

// virtual is a NIC without a device link (lo, a bridge, a veth).
func virtual(name, mac string) tree {
	return tree{"sys/class/net/" + name + "/address": mac + "\n", "sys/class/net/" + name + "/carrier": "1\n"}
}

// disk is a whole disk's sysfs entry with its device's extra files.
func disk(name, sectors, rotational string, device tree) tree {
	d := "sys/block/" + name + "/"
	tr := tree{d + "size": sectors + "\n", d + "queue/rotational": rotational + "\n", d + "device/": ""}
	for k, v := range device {
		tr[d+k] = v
	}
	return tr
}

// vpd80 is a Unit Serial Number VPD page holding serial.
func vpd80(serial string) string {
	return string([]byte{0, 0x80, 0, byte(len(serial))}) + serial
}

// qemuVirtio: qemu's q35 with a virtio disk (-drive ...,serial=...), a
// virtio NIC with link and a bridge of the agent's making.
var qemuVirtio = merge(
	tree{
		"sys/class/dmi/id/sys_vendor":     "QEMU\n",
		"sys/class/dmi/id/product_name":   "Standard PC (Q35 + ICH9, 2009)\n",
		"sys/class/dmi/id/product_serial": "\n",
		"sys/class/dmi/id/product_uuid":   "5e1c4b3a-0d2f-4f53-9e3c-1a2b3c4d5e6f\n",
		"proc/cpuinfo":                    x86CPUInfo,
		"proc/meminfo":                    meminfo,
		// Not disks: a loop device, zram, an optical drive.
		"sys/block/loop0/size": "1024\n", "sys/block/zram0/size": "2048\n", "sys/block/zram0/device/": "",
		"sys/block/sr0/size": "2097151\n", "sys/block/sr0/device/model": "QEMU DVD-ROM\n",
	},
	disk("vda", "41943040", "1", tree{"serial": "KFDISK0001\n"}),
	nic("enp1s0", "52:54:00:12:34:56", "virtio_net", "-1", "1"),
	virtual("lo", "00:00:00:00:00:00"),
	virtual("cni0", "aa:bb:cc:dd:ee:ff"),
)

// server: a dual-socket server with NVMe and SATA disks, two NICs (one
// without link, whose driver refuses speed), and an InfiniBand port.
var server = merge(
	tree{
		"sys/class/dmi/id/sys_vendor":     "Dell Inc.\n",
		"sys/class/dmi/id/product_name":   "PowerEdge R650\n",
		"sys/class/dmi/id/product_serial": "7XK2B53\n",
		"sys/class/dmi/id/product_uuid":   "4c4c4544-0058-4b10-8032-b7c04f423533\n",
		"proc/cpuinfo":                    x86CPUInfo,
		"proc/meminfo":                    "MemTotal:       263801916 kB\n",
		// NVMe multipath's per-path device, hidden.
		"sys/block/nvme0c0n1/hidden": "1\n", "sys/block/nvme0c0n1/size": "3750748848\n", "sys/block/nvme0c0n1/device/": "",
		// A partition listed where it should not be.
		"sys/block/sda1/partition": "1\n", "sys/block/sda1/size": "2048\n", "sys/block/sda1/device/": "",
		"sys/block/dm-0/size": "100\n", "sys/block/md0/size": "100\n",
	},
	disk("nvme0n1", "3750748848", "0", tree{"device/model": "Dell Ent NVMe P5600 MU U.2 1.6TB        \n", "device/serial": "PHAB1234005G1P6AGN  \n"}),
	disk("sda", "3907029168", "1", tree{"device/model": "ST2000NM0055-1V4\n", "device/vpd_pg80": vpd80("  ZC20XYZ1")}),
	disk("sdb", "937703088", "0", tree{"device/model": "SSDSC2KB480G8R  \n", "device/serial": "\n", "device/vpd_pg80": vpd80("BTYF00000000480BGN")}),
	nic("eno1", "B4:96:91:00:00:01", "ice", "25000", "1"),
	nic("eno2", "b4:96:91:00:00:02", "ice", "", "0"),
	tree{"sys/class/net/ib0/address": "80:00:02:08:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:0b:0c\n", "sys/class/net/ib0/device/": ""},
)

// noDMI: an arm64 board without DMI, an SD card left out by name, a
// USB disk without model or serial.
var noDMI = merge(
	tree{"proc/cpuinfo": arm64CPUInfo, "proc/meminfo": "MemTotal:        8000000 kB\n"},
	disk("sda", "60000000", "1", nil),
	nic("end0", "dc:a6:32:01:02:03", "bcmgenet", "1000", "1"),
)

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		name string
		root tree
		want v1alpha1.HardwareFacts
	}{
		{"qemu virtio machine", qemuVirtio, v1alpha1.HardwareFacts{
			System:      v1alpha1.SystemFacts{Vendor: "QEMU", Product: "Standard PC (Q35 + ICH9, 2009)", UUID: "5e1c4b3a-0d2f-4f53-9e3c-1a2b3c4d5e6f"},
			CPU:         v1alpha1.CPUFacts{Model: "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", Count: 2},
			MemoryBytes: 4028232 * 1024, MemoryMiB: 4028232 * 1024 >> 20,
			Disks: []v1alpha1.DiskFacts{{Name: "vda", SizeBytes: 41943040 * 512, Serial: "KFDISK0001", Rotational: true}},
			NICs:  []v1alpha1.NICFacts{{MAC: "52:54:00:12:34:56", Name: "enp1s0", Driver: "virtio_net", Link: true}},
		}},
		{"NVMe and SATA server", server, v1alpha1.HardwareFacts{
			System:      v1alpha1.SystemFacts{Vendor: "Dell Inc.", Product: "PowerEdge R650", Serial: "7XK2B53", UUID: "4c4c4544-0058-4b10-8032-b7c04f423533"},
			CPU:         v1alpha1.CPUFacts{Model: "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", Count: 2},
			MemoryBytes: 263801916 * 1024, MemoryMiB: 263801916 * 1024 >> 20,
			Disks: []v1alpha1.DiskFacts{
				{Name: "nvme0n1", SizeBytes: 3750748848 * 512, Model: "Dell Ent NVMe P5600 MU U.2 1.6TB", Serial: "PHAB1234005G1P6AGN"},
				{Name: "sda", SizeBytes: 3907029168 * 512, Model: "ST2000NM0055-1V4", Serial: "ZC20XYZ1", Rotational: true},
				{Name: "sdb", SizeBytes: 937703088 * 512, Model: "SSDSC2KB480G8R", Serial: "BTYF00000000480BGN"},
			},
			NICs: []v1alpha1.NICFacts{
				{MAC: "b4:96:91:00:00:01", Name: "eno1", Driver: "ice", SpeedMbps: 25000, Link: true},
				{MAC: "b4:96:91:00:00:02", Name: "eno2", Driver: "ice"},
			},
		}},
		{"arm64 board without DMI", noDMI, v1alpha1.HardwareFacts{
			CPU:         v1alpha1.CPUFacts{Model: "ARM part 0xd0c", Count: 4},
			MemoryBytes: 8000000 * 1024, MemoryMiB: 8000000 * 1024 >> 20,
			Disks: []v1alpha1.DiskFacts{{Name: "sda", SizeBytes: 60000000 * 512, Rotational: true}},
			NICs:  []v1alpha1.NICFacts{{MAC: "dc:a6:32:01:02:03", Name: "end0", Driver: "bcmgenet", SpeedMbps: 1000, Link: true}},
		}},
		{"nothing readable", tree{"etc/hostname": "x\n"}, v1alpha1.HardwareFacts{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Read(tc.root.write(t))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			// What the agent sends, kubefarm-pxe accepts as it is.
			if _, err := (bootproto.DiscoveryReport{MAC: "52:54:00:12:34:56", Hardware: got}).Validate(); err != nil {
				t.Errorf("kubefarm-pxe would refuse it: %v", err)
			}
		})
	}
}

// TestBounds: a hostile or odd host (long and unprintable DMI strings, too
// many disks and NICs, absurd numbers) still yields a report kubefarm-pxe
// accepts.
func TestBounds(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	tr := tree{
		"sys/class/dmi/id/sys_vendor":     "\x1b[31mEvil\x00Vendor\xff\n",
		"sys/class/dmi/id/product_name":   long,
		"sys/class/dmi/id/product_serial": "\t  " + strings.Repeat("S", 300),
		"sys/class/dmi/id/product_uuid":   strings.Repeat("u", 100),
		"proc/cpuinfo":                    "model name\t: " + long + "\n",
		"proc/meminfo":                    "MemTotal: 99999999999999999999 kB\n",
	}
	for i := range 70 {
		tr = merge(tr, disk(fmt.Sprintf("sd%03d", i), "-5", "1", tree{"device/model": "M\u200bodel\n"}))
	}
	for i := range 40 {
		tr = merge(tr, nic(fmt.Sprintf("eth%02d", i), fmt.Sprintf("02:00:00:00:00:%02x", i), strings.Repeat("d", 80), "99999999999", "1"))
	}
	got := Read(tr.write(t))
	if _, err := (bootproto.DiscoveryReport{MAC: "02:00:00:00:00:01", Hardware: got}).Validate(); err != nil {
		t.Fatalf("kubefarm-pxe would refuse it: %v", err)
	}
	s := got.System
	if s.Vendor != "[31mEvil Vendor?" {
		t.Errorf("vendor %q", s.Vendor)
	}
	if len(s.Product) != 128 || !strings.HasPrefix(s.Product, "éé") || len(s.Serial) != 128 || len(s.UUID) != 64 || len(got.CPU.Model) != 128 {
		t.Errorf("not cut to the API's lengths: product %d, serial %d, uuid %d, cpu %d", len(s.Product), len(s.Serial), len(s.UUID), len(got.CPU.Model))
	}
	if got.MemoryBytes != 0 || got.CPU.Count != 0 {
		t.Errorf("memory %d, cpus %d from nonsense", got.MemoryBytes, got.CPU.Count)
	}
	if len(got.Disks) != bootproto.MaxDiscoveryDisks || got.Disks[0].Name != "sd000" || got.Disks[0].SizeBytes != 0 || got.Disks[0].Model != "M?odel" && got.Disks[0].Model != "M odel" {
		t.Errorf("disks: %d, first %+v", len(got.Disks), got.Disks[0])
	}
	if len(got.NICs) != bootproto.MaxDiscoveryNICs || got.NICs[0].SpeedMbps != 0 || len(got.NICs[0].Driver) != 64 {
		t.Errorf("nics: %d, first %+v", len(got.NICs), got.NICs[0])
	}
}

func TestClean(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"  Dell Inc.  \n", 128, "Dell Inc."},
		{"To Be Filled By O.E.M.", 128, "To Be Filled By O.E.M."},
		{"a\tb\x00c", 128, "a b c"},
		{"bad\xffutf8", 128, "bad?utf8"},
		{"rune\uFFFDerror", 128, "rune?error"},
		{"ééé", 5, "éé"},
		{"abc   def", 5, "abc"},
		{"\x1b[2J", 128, "[2J"},
		{"", 10, ""},
	} {
		if got := Clean(tc.in, tc.max); got != tc.want {
			t.Errorf("Clean(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}

func TestVPDSerial(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want string
	}{
		{[]byte(vpd80("ZC20XYZ1")), "ZC20XYZ1"},
		{[]byte{0, 0x80, 0, 3, 'a', 'b', 'c', 'd'}, "abc"}, // length wins over what follows
		{[]byte{0, 0x80, 0, 9, 'a', 'b'}, "ab"},            // a page cut short
		{[]byte{0, 0x83, 0, 2, 'a', 'b'}, ""},              // another page
		{[]byte{0, 0x80}, ""},
	} {
		if got := vpdSerial(tc.in); got != tc.want {
			t.Errorf("vpdSerial(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestCPUArm64Unknown(t *testing.T) {
	root := tree{"proc/cpuinfo": "processor\t: 0\nCPU implementer\t: 0x99\nCPU part\t: 0x001\n"}.write(t)
	if got := CPU(root); got != (v1alpha1.CPUFacts{Model: "0x99 part 0x001", Count: 1}) {
		t.Errorf("got %+v", got)
	}
}

func TestUsableBMCAddress(t *testing.T) {
	for _, tc := range []struct {
		ip   net.IP
		want string
	}{
		{net.IPv4(10, 0, 0, 5), "10.0.0.5"},
		{net.ParseIP("192.168.1.20").To4(), "192.168.1.20"},
		{net.IPv4zero, ""},
		{net.IPv4bcast, ""},
		{net.IPv4(127, 0, 0, 1), ""},
		{net.IPv4(224, 0, 0, 1), ""},
		{net.ParseIP("fe80::1"), ""},
		{nil, ""},
	} {
		if got := UsableBMCAddress(tc.ip); got != tc.want {
			t.Errorf("UsableBMCAddress(%v) = %q, want %q", tc.ip, got, tc.want)
		}
	}
}

func TestHasIPMIDevice(t *testing.T) {
	if HasIPMIDevice(tree{"dev/null": ""}.write(t)) {
		t.Error("no device, yet found one")
	}
	if !HasIPMIDevice(tree{"dev/ipmi0": ""}.write(t)) || !HasIPMIDevice(tree{"dev/ipmi/0": ""}.write(t)) {
		t.Error("device not found")
	}
}

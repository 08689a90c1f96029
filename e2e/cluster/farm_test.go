package cluster

import (
	"slices"
	"strings"
	"testing"
)

// TestQemuArgs: a BIOS machine netboots an e1000 through its iPXE ROM; a
// UEFI one runs OVMF with a virtio-net NIC and no option ROM, so that the
// firmware's own PXE client asks kubefarm-pxe for the UEFI binary. Both
// are TCG machines with no disk on their own tap, unless one is asked for
// (discovery's e2e machine, whose disk serial it reports).
func TestQemuArgs(t *testing.T) {
	cases := []struct {
		name       string
		m          FarmMachine
		want, deny []string
	}{
		{name: "BIOS", m: FarmMachine{Name: "a", MAC: "52:54:00:00:00:01", Index: 3},
			want: []string{"-device e1000,netdev=n0,mac=52:54:00:00:00:01", "-boot n", "-netdev tap,id=n0,ifname=kfpxe-vm3,script=no,downscript=no"},
			deny: []string{"-bios", "virtio", "aarch64"}},
		{name: "UEFI", m: FarmMachine{Name: "b", MAC: "52:54:00:00:00:02", Index: 4, UEFI: true},
			want: []string{"-bios " + OVMF, "-device virtio-net-pci,netdev=n0,mac=52:54:00:00:00:02,romfile=", "-netdev tap,id=n0,ifname=kfpxe-vm4,script=no,downscript=no"},
			deny: []string{"e1000", "-boot", "aarch64"}},
		{name: "BIOS with a second NIC for a bond", m: FarmMachine{Name: "d", MAC: "52:54:00:00:00:04", Index: 6, SecondMAC: "52:54:00:00:01:04"},
			want: []string{"-device e1000,netdev=n0,mac=52:54:00:00:00:04", "-boot n",
				"-netdev tap,id=n1,ifname=kfpxe-vm6b,script=no,downscript=no", "-device e1000,netdev=n1,mac=52:54:00:00:01:04,romfile="},
			deny: []string{"-bios"}},
		{name: "arm64", m: FarmMachine{Name: "e", MAC: "52:54:00:00:00:05", Index: 7, Arch: "arm64"},
			want: []string{"qemu-system-aarch64", "-machine virt,accel=tcg", "-bios " + AAVMF,
				"-device virtio-net-pci,netdev=n0,mac=52:54:00:00:00:05,romfile=", "-netdev tap,id=n0,ifname=kfpxe-vm7,script=no,downscript=no"},
			deny: []string{"qemu-system-x86_64", "e1000", OVMF, "-boot"}},
		{name: "BIOS with a disk for discovery", m: FarmMachine{Name: "c", MAC: "52:54:00:00:00:03", Index: 5, DiskSerial: "KF0001"},
			want: []string{"-device e1000,netdev=n0,mac=52:54:00:00:00:03", "-boot n",
				"-blockdev null-co,node-name=disk0,size=1073741824,read-zeroes=on", "-device virtio-blk-pci,drive=disk0,serial=KF0001"},
			deny: []string{"-bios", "-hda", "-drive"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := QemuArgs(tc.m, "/tmp/console.log")
			tcg := slices.Contains(args, "pc,accel=tcg") || (tc.m.ARM64() && slices.Contains(args, "virt,accel=tcg"))
			if !strings.HasPrefix(args[0], "qemu-system-") || !tcg || !slices.Contains(args, "file:/tmp/console.log") {
				t.Errorf("not a TCG machine with its console in the file: %q", args)
			}
			line := strings.Join(args, " ")
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("%q lacks %q", line, w)
				}
			}
			for _, d := range tc.deny {
				if strings.Contains(line, d) {
					t.Errorf("%q has %q", line, d)
				}
			}
			if tc.m.DiskSerial == "" && (slices.Contains(args, "-hda") || slices.Contains(args, "-drive") || slices.Contains(args, "-blockdev")) {
				t.Errorf("a diskless machine has a disk: %q", line)
			}
		})
	}
}

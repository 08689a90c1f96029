package bootproto

// The checks kubefarm-pxe applies to a DiscoveryReport before anything of
// it reaches the API server: every bound of the DiscoveredMachine type,
// checked here so that a bad report is refused with a reason (400) rather
// than truncated, or refused later by the API server after costing a
// write. The report comes from a host on the boot network, which kubefarm
// treats as hostile: its strings end up in `kubectl get` columns, so they
// must be printable (no terminal escapes).

import (
	"errors"
	"fmt"
	"net"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
)

// The DiscoveredMachine type's bounds (api/v1alpha1), repeated here so
// that the report is refused before a write.
const (
	MaxDiscoveryText   = 128 // vendor, product, serial, CPU model, disk model and serial
	MaxDiscoveryUUID   = 64
	MaxDiscoveryDevice = 32 // disk and NIC names
	MaxDiscoveryDriver = 64
	MaxDiscoveryDisks  = 64
	MaxDiscoveryNICs   = 32
	MaxDiscoveryCPUs   = 65536
)

// Validate checks every field of r against the DiscoveredMachine type's
// bounds and returns the report as it is to be recorded: MACs in the API's
// lower-case colon form, and memoryMiB derived from memoryBytes (a
// memoryMiB that disagrees with it is refused). The first field at fault
// is named in the error.
func (r DiscoveryReport) Validate() (DiscoveryReport, error) {
	mac, err := NormalizeMAC(r.MAC)
	if err != nil {
		return DiscoveryReport{}, fmt.Errorf("mac: %w", err)
	}
	out := DiscoveryReport{MAC: mac, Hardware: r.Hardware}
	hw := &out.Hardware
	var errs []error
	text := func(field, v string, max int) {
		if len(v) > max {
			errs = append(errs, fmt.Errorf("%s is %d bytes, over %d", field, len(v), max))
		} else if !Printable(v) {
			errs = append(errs, fmt.Errorf("%s must be printable text", field))
		}
	}
	text("hardware.system.vendor", hw.System.Vendor, MaxDiscoveryText)
	text("hardware.system.product", hw.System.Product, MaxDiscoveryText)
	text("hardware.system.serial", hw.System.Serial, MaxDiscoveryText)
	text("hardware.system.uuid", hw.System.UUID, MaxDiscoveryUUID)
	text("hardware.cpu.model", hw.CPU.Model, MaxDiscoveryText)
	if hw.CPU.Count < 0 || hw.CPU.Count > MaxDiscoveryCPUs {
		errs = append(errs, fmt.Errorf("hardware.cpu.count %d is not within 0..%d", hw.CPU.Count, MaxDiscoveryCPUs))
	}
	if hw.MemoryBytes < 0 {
		errs = append(errs, fmt.Errorf("hardware.memoryBytes %d is negative", hw.MemoryBytes))
	}
	if mib := hw.MemoryBytes >> 20; hw.MemoryMiB != 0 && hw.MemoryMiB != mib {
		errs = append(errs, fmt.Errorf("hardware.memoryMiB %d is not memoryBytes in MiB (%d)", hw.MemoryMiB, mib))
	} else if hw.MemoryBytes >= 0 {
		hw.MemoryMiB = mib
	}
	if hw.BMCAddress != "" {
		if ip := net.ParseIP(hw.BMCAddress); ip == nil || ip.To4() == nil || len(hw.BMCAddress) > 15 {
			errs = append(errs, fmt.Errorf("hardware.bmcAddress %q is not an IPv4 address", clip(hw.BMCAddress)))
		}
	}
	if len(hw.Disks) > MaxDiscoveryDisks {
		errs = append(errs, fmt.Errorf("hardware.disks has %d entries, over %d", len(hw.Disks), MaxDiscoveryDisks))
	} else {
		hw.Disks = append([]v1alpha1.DiskFacts(nil), hw.Disks...)
		for i, d := range hw.Disks {
			f := fmt.Sprintf("hardware.disks[%d]", i)
			if d.Name == "" {
				errs = append(errs, errors.New(f+".name is empty"))
			}
			text(f+".name", d.Name, MaxDiscoveryDevice)
			text(f+".model", d.Model, MaxDiscoveryText)
			text(f+".serial", d.Serial, MaxDiscoveryText)
			if d.SizeBytes < 0 {
				errs = append(errs, fmt.Errorf("%s.sizeBytes %d is negative", f, d.SizeBytes))
			}
		}
	}
	if len(hw.NICs) > MaxDiscoveryNICs {
		errs = append(errs, fmt.Errorf("hardware.nics has %d entries, over %d", len(hw.NICs), MaxDiscoveryNICs))
	} else {
		hw.NICs = append([]v1alpha1.NICFacts(nil), hw.NICs...)
		for i := range hw.NICs {
			n := &hw.NICs[i]
			f := fmt.Sprintf("hardware.nics[%d]", i)
			if m, err := NormalizeMAC(n.MAC); err != nil {
				errs = append(errs, fmt.Errorf("%s.mac: %w", f, err))
			} else {
				n.MAC = m
			}
			text(f+".name", n.Name, MaxDiscoveryDevice)
			text(f+".driver", n.Driver, MaxDiscoveryDriver)
			if n.SpeedMbps < 0 {
				errs = append(errs, fmt.Errorf("%s.speedMbps %d is negative", f, n.SpeedMbps))
			}
		}
	}
	if len(errs) > 0 {
		// The first reason only: the answer is bounded, whatever the
		// report held.
		return DiscoveryReport{}, errs[0]
	}
	if len(out.Hardware.Disks) == 0 {
		out.Hardware.Disks = nil
	}
	if len(out.Hardware.NICs) == 0 {
		out.Hardware.NICs = nil
	}
	return out, nil
}

// clip bounds a value quoted in an error: the error goes back to the
// client and into logs.
func clip(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}

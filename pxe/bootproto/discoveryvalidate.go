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
	var c reportCheck
	c.text("hardware.system.vendor", hw.System.Vendor, MaxDiscoveryText)
	c.text("hardware.system.product", hw.System.Product, MaxDiscoveryText)
	c.text("hardware.system.serial", hw.System.Serial, MaxDiscoveryText)
	c.text("hardware.system.uuid", hw.System.UUID, MaxDiscoveryUUID)
	c.text("hardware.cpu.model", hw.CPU.Model, MaxDiscoveryText)
	if hw.CPU.Count < 0 || hw.CPU.Count > MaxDiscoveryCPUs {
		c.fail(fmt.Errorf("hardware.cpu.count %d is not within 0..%d", hw.CPU.Count, MaxDiscoveryCPUs))
	}
	if hw.MemoryBytes < 0 {
		c.fail(fmt.Errorf("hardware.memoryBytes %d is negative", hw.MemoryBytes))
	}
	if mib := hw.MemoryBytes >> 20; hw.MemoryMiB != 0 && hw.MemoryMiB != mib {
		c.fail(fmt.Errorf("hardware.memoryMiB %d is not memoryBytes in MiB (%d)", hw.MemoryMiB, mib))
	} else if hw.MemoryBytes >= 0 {
		hw.MemoryMiB = mib
	}
	if hw.BMCAddress != "" {
		if ip := net.ParseIP(hw.BMCAddress); ip == nil || ip.To4() == nil || len(hw.BMCAddress) > 15 {
			c.fail(fmt.Errorf("hardware.bmcAddress %q is not an IPv4 address", clip(hw.BMCAddress)))
		}
	}
	hw.Disks = c.disks(hw.Disks)
	hw.NICs = c.nics(hw.NICs)
	if len(c.errs) > 0 {
		// The first reason only: the answer is bounded, whatever the
		// report held.
		return DiscoveryReport{}, c.errs[0]
	}
	return out, nil
}

// reportCheck collects what is wrong with a report, in field order.
type reportCheck struct{ errs []error }

func (c *reportCheck) fail(err error) { c.errs = append(c.errs, err) }

// text refuses an over-long or unprintable string: it ends up in printer
// columns and terminals.
func (c *reportCheck) text(field, v string, max int) {
	if len(v) > max {
		c.fail(fmt.Errorf("%s is %d bytes, over %d", field, len(v), max))
	} else if !Printable(v) {
		c.fail(fmt.Errorf("%s must be printable text", field))
	}
}

// disks checks the disks and returns a copy (nil when there are none).
func (c *reportCheck) disks(in []v1alpha1.DiskFacts) []v1alpha1.DiskFacts {
	if len(in) > MaxDiscoveryDisks {
		c.fail(fmt.Errorf("hardware.disks has %d entries, over %d", len(in), MaxDiscoveryDisks))
		return nil
	}
	if len(in) == 0 {
		return nil
	}
	out := append([]v1alpha1.DiskFacts(nil), in...)
	for i, d := range out {
		f := fmt.Sprintf("hardware.disks[%d]", i)
		if d.Name == "" {
			c.fail(errors.New(f + ".name is empty"))
		}
		c.text(f+".name", d.Name, MaxDiscoveryDevice)
		c.text(f+".model", d.Model, MaxDiscoveryText)
		c.text(f+".serial", d.Serial, MaxDiscoveryText)
		if d.SizeBytes < 0 {
			c.fail(fmt.Errorf("%s.sizeBytes %d is negative", f, d.SizeBytes))
		}
	}
	return out
}

// nics checks the NICs and returns a copy with their MACs normalized (nil
// when there are none).
func (c *reportCheck) nics(in []v1alpha1.NICFacts) []v1alpha1.NICFacts {
	if len(in) > MaxDiscoveryNICs {
		c.fail(fmt.Errorf("hardware.nics has %d entries, over %d", len(in), MaxDiscoveryNICs))
		return nil
	}
	if len(in) == 0 {
		return nil
	}
	out := append([]v1alpha1.NICFacts(nil), in...)
	for i := range out {
		n := &out[i]
		f := fmt.Sprintf("hardware.nics[%d]", i)
		if m, err := NormalizeMAC(n.MAC); err != nil {
			c.fail(fmt.Errorf("%s.mac: %w", f, err))
		} else {
			n.MAC = m
		}
		c.text(f+".name", n.Name, MaxDiscoveryDevice)
		c.text(f+".driver", n.Driver, MaxDiscoveryDriver)
		if n.SpeedMbps < 0 {
			c.fail(fmt.Errorf("%s.speedMbps %d is negative", f, n.SpeedMbps))
		}
	}
	return out
}

// clip bounds a value quoted in an error: the error goes back to the
// client and into logs.
func clip(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}

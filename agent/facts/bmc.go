package facts

// The BMC's address, read from the host side: the IPMI system interface
// (the kernel's ipmi_si, and ipmi_devintf's /dev/ipmi0) answers the LAN
// configuration of the BMC's LAN channel, as `ipmitool lan print` shows it
// (ipmitool is not in the node image; github.com/bougou/go-ipmi's open
// interface asks the same through the device). A host without a BMC, or
// without its kernel driver, has no device: the address is then left
// empty. Redfish-only BMCs are read the same way when they also answer
// IPMI on the system interface, as nearly all do.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/types"
)

// ipmiDevices are where the kernel's IPMI device appears (go-ipmi opens
// the first that exists, for device 0).
var ipmiDevices = []string{"dev/ipmi0", "dev/ipmi/0", "dev/ipmidev/0"}

// HasIPMIDevice says whether root has the IPMI system interface's device.
func HasIPMIDevice(root string) bool {
	for _, d := range ipmiDevices {
		if exists(filepath.Join(root, d)) {
			return true
		}
	}
	return false
}

// BMCAddress reads the BMC's IPv4 address through /dev/ipmi0: the first
// LAN channel (1 to 11, as ipmitool looks for it) whose address is set.
// "" and no error when the host has no IPMI device; an error when it has
// one and the BMC does not say. ctx bounds it; each request waits at most
// perRequest.
func BMCAddress(ctx context.Context, perRequest time.Duration) (string, error) {
	if !HasIPMIDevice("/") {
		return "", nil
	}
	c, err := client.NewOpenClient()
	if err != nil {
		return "", err
	}
	c.WithTimeout(perRequest)
	if err := c.Connect(ctx); err != nil {
		return "", fmt.Errorf("opening the IPMI device: %w", err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	var errs []error
	for ch := uint8(1); ch <= 11; ch++ {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		info, err := c.GetChannelInfo(ctx, ch)
		if err != nil || info.ChannelMedium != types.ChannelMediumLAN {
			continue // no such channel, or not a LAN
		}
		p := &types.LanConfigParam_IP{}
		if err := c.GetLanConfigParamFor(ctx, ch, p); err != nil {
			errs = append(errs, fmt.Errorf("LAN channel %d: %w", ch, err))
			continue
		}
		if a := UsableBMCAddress(p.IP); a != "" {
			return a, nil
		}
	}
	if len(errs) > 0 {
		return "", errors.Join(errs...)
	}
	return "", nil
}

// UsableBMCAddress is ip as the API records it (dotted IPv4), or "" for
// none: an unset address (0.0.0.0, what a BMC without a lease says), or
// anything that is not a unicast IPv4 address.
func UsableBMCAddress(ip net.IP) string {
	v4 := ip.To4()
	if v4 == nil || v4.IsUnspecified() || v4.IsLoopback() || v4.IsMulticast() || v4.Equal(net.IPv4bcast) {
		return ""
	}
	return v4.String()
}

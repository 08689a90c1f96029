package bootfile

import (
	"net"
	"strconv"
	"strings"

	"github.com/kubefarm/kubefarm/pxe/bootpaths"
)

// Client architecture types from option 93 (IANA "Processor Architecture
// Types"); only the ones kubefarm can boot are named.
const (
	ArchBIOS         uint16 = 0
	ArchEFIIA32      uint16 = 6
	ArchEFIBC        uint16 = 7 // EFI byte code; in practice x86-64 firmware sends it
	ArchEFIx8664     uint16 = 9
	ArchEFIARM64     uint16 = 11
	ArchEFIx8664HTTP uint16 = 16
	ArchEFIARM64HTTP uint16 = 19
)

// Binary names served by the TFTP and HTTP boot services; package
// bootpaths owns them and their allow-list.
const (
	BinaryBIOS      = bootpaths.BinaryBIOS
	BinaryUEFIx64   = bootpaths.BinaryUEFIx64
	BinarySNPOnly   = bootpaths.BinarySNPOnly
	BinaryUEFIARM64 = bootpaths.BinaryUEFIARM64
)

// VendorHTTPClient is the option 60 prefix of UEFI HTTP boot clients; the
// reply must echo "HTTPClient" or the firmware ignores the offer.
const VendorHTTPClient = "HTTPClient"

// UserClassIPXE is the option 77 value iPXE sends once it runs.
const UserClassIPXE = "iPXE"

// Config says where boot files are served.
type Config struct {
	// Server is the address of the TFTP and HTTP boot services.
	Server net.IP
	// HTTPPort of the HTTP boot service; 0 or 80 keeps the URL port-less.
	HTTPPort int
	// UEFIx64Binary overrides the x86-64 UEFI binary (ipxe.efi by default).
	UEFIx64Binary string
}

// Request holds the facts of a DHCP request that decide the boot file.
type Request struct {
	MAC net.HardwareAddr
	// Arches are the option 93 values; HasArch tells "absent" from BIOS (0).
	Arches  []uint16
	HasArch bool
	// VendorClass is option 60.
	VendorClass string
	// UserClasses are the option 77 entries.
	UserClasses []string
}

// Protocol is how the client fetches the boot file.
type Protocol int

const (
	// None: no boot file for this client; Reason says why.
	None Protocol = iota
	// TFTP: File is a name on the TFTP server at NextServer.
	TFTP
	// HTTP: File is an absolute http:// URL.
	HTTP
)

func (p Protocol) String() string {
	switch p {
	case TFTP:
		return "tftp"
	case HTTP:
		return "http"
	default:
		return "none"
	}
}

// Result is the decision.
type Result struct {
	Protocol Protocol
	// File is the TFTP file name or the HTTP URL.
	File string
	// NextServer is siaddr (and option 66) for TFTP boots.
	NextServer net.IP
	// VendorClass, if set, must be sent back as option 60.
	VendorClass string
	// Reason explains a None result, for logs and metrics.
	Reason string
}

// Decide picks the boot file for a request. Clients already running iPXE
// win over the architecture: they are past firmware and want their script.
func Decide(req Request, cfg Config) Result {
	if cfg.Server == nil || cfg.Server.To4() == nil {
		return Result{Reason: "no IPv4 boot server configured"}
	}
	if isIPXE(req.UserClasses) {
		if len(req.MAC) != 6 {
			return Result{Reason: "iPXE client without an Ethernet MAC"}
		}
		return Result{Protocol: HTTP, File: httpBase(cfg).Script(req.MAC)}
	}
	if !req.HasArch || len(req.Arches) == 0 {
		return Result{Reason: "no client architecture (option 93): not a PXE client"}
	}
	// A client may list several architectures; the first is its preference.
	arch := req.Arches[0]
	httpClient := strings.HasPrefix(req.VendorClass, VendorHTTPClient)
	switch arch {
	case ArchBIOS:
		return tftp(cfg, BinaryBIOS)
	case ArchEFIBC, ArchEFIx8664:
		if httpClient {
			return httpBoot(cfg, uefiX64(cfg))
		}
		return tftp(cfg, uefiX64(cfg))
	case ArchEFIARM64:
		if httpClient {
			return httpBoot(cfg, BinaryUEFIARM64)
		}
		return tftp(cfg, BinaryUEFIARM64)
	case ArchEFIx8664HTTP:
		return httpBoot(cfg, uefiX64(cfg))
	case ArchEFIARM64HTTP:
		return httpBoot(cfg, BinaryUEFIARM64)
	default:
		return Result{Reason: "unsupported client architecture " + strconv.Itoa(int(arch))}
	}
}

func isIPXE(classes []string) bool {
	for _, c := range classes {
		if c == UserClassIPXE {
			return true
		}
	}
	return false
}

func uefiX64(cfg Config) string {
	if cfg.UEFIx64Binary != "" {
		return cfg.UEFIx64Binary
	}
	return BinaryUEFIx64
}

func tftp(cfg Config, file string) Result {
	return Result{Protocol: TFTP, File: file, NextServer: cfg.Server.To4()}
}

func httpBoot(cfg Config, binary string) Result {
	return Result{Protocol: HTTP, File: httpBase(cfg).Binary(binary), VendorClass: VendorHTTPClient}
}

func httpBase(cfg Config) bootpaths.Base {
	return bootpaths.NewBase(cfg.Server.To4(), cfg.HTTPPort)
}

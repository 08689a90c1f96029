// Package bootfile decides what a network-booting client should load next,
// from the facts of its DHCP request: the client architecture (option 93),
// the vendor class (option 60) and the user class (option 77).
//
// The decision is a pure function of plain structs so that it can be
// table-tested without building packets; the DHCP server translates its
// result into siaddr, option 66/67 or an HTTP URL.
//
// Knobs (Config):
//   - Server / HTTPPort: where the TFTP and HTTP boot services answer.
//   - UEFIx64Binary: ipxe.efi by default; snponly.efi for firmware whose
//     iPXE drivers misbehave and that should use the UEFI SNP driver instead.
package bootfile

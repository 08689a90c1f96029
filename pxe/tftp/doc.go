// Package tftp is the read-only TFTP service of kubefarm-pxe.
//
// Firmware PXE clients can only fetch their first stage over TFTP, so this
// service exists to hand out the iPXE binaries that package bootfile names
// (undionly.kpxe, ipxe.efi, snponly.efi, ipxe-arm64.efi) and nothing else:
// once iPXE runs, everything else travels over HTTP.
//
// Because TFTP has no authentication and answers anyone on the boot network,
// the service is deliberately narrow:
//
//   - ValidateName is a pure check of the requested name: no path
//     separators, no "..", no NUL or control characters, bounded length,
//     and the name must be on the allow-list. Anything else is refused
//     before the file system is touched.
//   - Write requests are refused.
//   - At most Config.MaxTransfers transfers run at once. pin/tftp starts a
//     goroutine and a socket per request before the handler runs; a request
//     over the limit is answered with an error packet at once, so it holds
//     them for one round trip and never opens a file or sends data.
//   - Every transfer has a per-packet timeout and a bounded number of
//     retries (pin/tftp's), so a client that vanishes frees its slot.
//
// blksize (RFC 2348) and tsize (RFC 2349) are negotiated by pin/tftp; the
// handler sets tsize from the file's size so clients that ask for it (iPXE
// does) learn the length up front. Other options, windowsize (RFC 7440)
// among them, are left out of the OACK, so every transfer is lockstep: one
// block, then its ACK. pin/tftp's sender anticipation (several blocks
// before an ACK, not negotiated) stays off: after a lost ACK inside a
// window it waits for an ACK that lockstep clients never resend, and the
// transfer fails. The socket comes from Listen, so that a request queued
// before Serve runs still negotiates blksize. Measurements, per-block
// costs and what was tried: docs/tftp.md.
//
// Metrics: kubefarm_pxe_tftp_transfers_total{result} and
// kubefarm_pxe_tftp_bytes_total.
package tftp

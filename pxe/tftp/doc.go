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
//   - parseRequest is a pure, bounded parser of what arrives on the port
//     (at most 512 bytes, 8 options of 32 bytes); a packet that is not a
//     well-formed request is dropped unanswered, so forged sources cannot
//     use the service as a reflector.
//   - ValidateName is a pure check of the requested name: no path
//     separators, no "..", no NUL or control characters, bounded length,
//     and the name must be on the allow-list. Anything else is refused
//     before the file system is touched. Write requests and any mode but
//     octet are refused.
//   - At most Config.MaxTransfers transfers run at once, each on one
//     goroutine taken when the request is accepted; a request over the
//     limit is answered with an error packet at once, without a socket, a
//     goroutine or a file.
//   - Every transfer has a per-packet timeout and a bounded number of
//     retries, and packets that are not progress (stray, repeated ACKs) do
//     not extend its wait, so a client that vanishes or babbles frees its
//     slot.
//
// The protocol is RFC 1350 with options (RFC 2347): blksize (RFC 2348,
// capped by Config.MaxBlockSize and the receiving interface's MTU), tsize
// (RFC 2349) and windowsize (RFC 7440, capped by Config.MaxWindowSize; EDK2
// asks for 4). negotiate is the pure decision on them; transfer is the
// sender's state machine, tested without sockets against a model client
// and over sockets against curl, atftp, tftp-hpa and raw packets. A client
// that asks for no window gets lockstep: one block, then its ACK.
//
// kubefarm has its own sender rather than pin/tftp's (used before, and
// still the Go client of the tests and benchmarks): pin/tftp v3.1.0 has no
// windowsize, and its wait for each ACK through the netpoller made a
// lockstep fetch 0.83x as fast as tftpd-hpa's. A transfer here waits in a
// blocking read on a socket connected to its client, as tftpd-hpa does,
// after polling it briefly (Config.SpinWait) while the client answers that
// fast, while there are no more such transfers than Ps, and on the
// netpoller beyond (socket.go). Measurements and what was tried:
// docs/tftp.md.
//
// Metrics: kubefarm_pxe_tftp_transfers_total{result} and
// kubefarm_pxe_tftp_bytes_total.
package tftp

// Package bootchain is the network boot acceptance test of kubefarm-pxe: a
// virtual machine, emulated by qemu under TCG (no KVM needed), boots from
// the real kubefarm-pxe binary through the whole chain that a bare-metal
// node goes through, and the booted kernel's initrd reports back.
//
// The test (bootchain_test.go) runs:
//
//   - a real kube-apiserver and etcd (internal/testing/testenv) holding a BootImage,
//     a NodePool and its Machines;
//   - the kubefarm-pxe binary, built from cmd/kubefarm-pxe and run with its
//     production flags inside a fresh network namespace, on a bridge that
//     also holds one tap device per virtual machine. The API server and the
//     artifact origin (an HTTP server the test runs, standing in for where a
//     BootImage's kernel, initrd and rootfs are published) are reached from
//     inside the namespace through listeners the test opens there;
//   - qemu-system-x86_64 inside the same namespace, network booting one
//     virtual machine per firmware, in turn;
//   - BIOS: SeaBIOS runs Debian's iPXE option ROM (ipxe-qemu) for an e1000.
//     iPXE does DHCP identifying itself with user class "iPXE", so
//     kubefarm-pxe sends it straight to its script URL: TFTP is not
//     involved, as in production for any client already running iPXE;
//   - UEFI: OVMF's own virtio-net driver and PXE (no option ROM) do DHCP
//     with client architecture 7 and are offered ipxe.efi over TFTP. The
//     reply says "PXEClient" (option 60) with PXE option 43 sub-option 6
//     = 8 (use this boot file, no boot server discovery), so EDK2 takes it
//     for a PXE offer, not a BINL one, and reads ipxe.efi over TFTP at
//     once. That iPXE does DHCP again as "iPXE" and goes on as above.
//     Debian's iPXE (2019) predates LoadFile2 initrd support: the kernel's
//     EFI stub finds the initrd only through the initrd=initrd argument
//     that kubefarm-pxe's script adds (it names the image initrd);
//   - neither firmware nor iPXE sends anything to port 4011, where an
//     authoritative kubefarm-pxe does not listen: iPXE gets its script URL
//     without "PXEClient", which it would take for a ProxyDHCP offer;
//   - in both, iPXE fetches the script over HTTP and then, by digest, the
//     kernel and initrd from kubefarm-pxe's artifact cache, which filled it
//     from the origin and verified it against the BootImage's digests.
//
// The kernel is Debian's (the package linux-image-amd64 depends on),
// fetched with `apt-get download` and cached under _build/bootchain-cache
// (FetchKernel). The initrd is built by the test (BuildInitrd): Debian's
// busybox-static, the NIC driver modules with their dependencies, and an
// /init that loads them, obtains its address from kubefarm-pxe's DHCP with
// udhcpc, and POSTs the machine's MAC, the kernel's boot ID and the
// kubefarm.image digest from its command line to kubefarm.server's /report
// (with busybox nc: busybox-static's wget crashes in static glibc's NSS;
// nc half-closes the connection once the request is sent, which
// kubefarm-pxe must and does answer). Then it powers the machine off.
//
// An arm64 machine (arm64_test.go, TestBootChainARM64, build tag
// multiarch: only `make test-arm64` runs it, never go test ./... or make
// test) boots the same way on qemu-system-aarch64's virt board, a
// Cortex-A57 under TCG, with EDK2's firmware (qemu-efi-aarch64) and a
// virtio-net NIC without option ROM, in a pool whose BootImage says arm64.
// Its firmware's DHCP says client architecture 11 and is sent to
// ipxe-arm64.efi over TFTP, from an --ipxe-dir holding Debian's x86
// binaries and the arm64 one `make ipxe-arm64` takes from Debian trixie's
// package (docs/ipxe.md). That iPXE runs the script, whose ${buildarch}
// check passes, and fetches Debian's arm64 kernel (an uncompressed Image,
// a PE file through its EFI stub) and an initrd of arm64 busybox-static and that kernel's
// virtio_pci and virtio_net modules, both downloaded with
// hack/apt-download-arch. The test asserts what it does for the x86 UEFI
// machine: arch 11 on the wire, the Offered Event naming ipxe-arm64.efi,
// the TFTP transfer, the script and the report. Power-on to report took
// about 20 s here (docs/ipxe.md).
//
// A third machine, x86 UEFI like the second, is listed in a pool whose
// BootImage says arm64 (misplaced_test.go): real iPXE runs the script's
// architecture check, prints why it stops on the console, and fetches
// nothing more: no kernel, no initrd, no boot secret, on the wire or in
// the server's counters.
//
// The proof of the chain is that report: kubefarm-pxe accepts it only from
// the machine's leased address and writes it into the Machine's
// status.lastBoot, which the test watches for. It also checks the server's
// own evidence of every stage (DHCP and TFTP metrics and logs, a UEFI
// machine's Offered Event naming the boot file of its architecture, the
// script served to the machine's address, artifact bytes served) and keeps the
// serial console, a packet capture of the VM's NIC and the server's log in
// the test's temporary folder, printing them when it fails.
package bootchain

// Package agent is the root of kubefarm-agent's packages, the program a
// netbooted node runs under systemd (ARCHITECTURE.md, boot steps 3 to 5):
//
//   - podguard: the nftables rules that drop what the node's pods send to
//     kubefarm-pxe; pure.
//   - pxeclient: GET /config/<mac>, POST /report and POST /heartbeat
//     against kubefarm-pxe with the boot's secret, bounded and retried;
//     POST /discovery, without one, once per call.
//   - render: the node configuration turned into files (kubelet, flannel,
//     hostname, time zone, root's SSH keys and password); pure.
//   - cnicheck: the verdict on the CNI chain of a root file system; pure
//     over a directory.
//   - facts: the hardware (DMI, CPU, memory, disks, NICs) read from a root's
//     /sys and /proc for discovery mode, within the API's bounds; pure over
//     a directory, but for the BMC's address (the IPMI device).
//
// What the kernel command line and the initrd tell the agent, and the
// bodies it exchanges with kubefarm-pxe, are the boot protocol both ends
// share: pxe/bootproto, pxe/bootsecret and pxe/nodeconfig.
//
// cmd/kubefarm-agent wires them.
package agent

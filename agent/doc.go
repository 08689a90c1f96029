// Package agent is the root of kubefarm-agent's packages, the program a
// netbooted node runs under systemd (ARCHITECTURE.md, boot steps 3 to 5):
//
//   - podguard: the nftables rules that drop what the node's pods send to
//     kubefarm-pxe; pure.
//   - pxeclient: GET /config/<mac>, POST /report and POST /heartbeat
//     against kubefarm-pxe with the boot's secret, bounded and retried.
//   - render: the node configuration turned into files (kubelet, flannel,
//     hostname, time zone, root's SSH keys and password); pure.
//   - cnicheck: the verdict on the CNI chain of a root file system; pure
//     over a directory.
//
// What the kernel command line and the initrd tell the agent, and the
// bodies it exchanges with kubefarm-pxe, are the boot protocol both ends
// share: pxe/bootproto, pxe/bootsecret and pxe/nodeconfig.
//
// cmd/kubefarm-agent wires them.
package agent

// Package agent is the root of kubefarm-agent's packages, the program a
// netbooted node runs under systemd (ARCHITECTURE.md, boot steps 3 to 5):
//
//   - bootparams: what the kernel command line and the initrd tell the
//     agent (kubefarm-pxe's URL, the image digest, the boot NIC).
//   - pxeclient: GET /config/<mac> and POST /report against kubefarm-pxe,
//     bounded and retried.
//   - render: the node configuration turned into files (kubelet, flannel,
//     hostname, time zone, root's SSH keys and password); pure.
//   - cnicheck: the verdict on the CNI chain of a root file system; pure
//     over a directory.
//
// cmd/kubefarm-agent wires them.
package agent

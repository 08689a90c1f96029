// Package bootproto is the wire protocol between a booting machine and
// kubefarm-pxe, in one place that both ends import: the kernel command-line
// keys and their parser (cmdline.go), the identifiers both sides check (a
// MAC, a digest, a boot ID: ids.go), and the bodies of POST /report
// (report.go) and POST /heartbeat (heartbeat.go). The per-boot secret that
// authenticates them is package bootsecret; the node configuration GET
// /config answers is package nodeconfig.
//
// It imports only the standard library and bootpaths, so that the node
// initrd's small static kubefarm-fetch can use it too.
package bootproto

// Package httpboot is the HTTP side of kubefarm-pxe: what iPXE fetches once
// it runs, and what UEFI HTTP boot firmware fetches first.
//
// Routes (GET and HEAD, except POST /report and POST /heartbeat; package
// bootpaths owns their shapes and the URLs built from them):
//
//   - /boot/<mac>.ipxe: the machine's iPXE script (Script, a pure
//     function). The MAC may be upper case or '-' separated; it is
//     normalised to the API's lower-case colon form. A MAC no Machine
//     claims gets what DecideUnclaimed says of its catch-all lease
//     (unclaimed.go): a Join pool's wait script (?wait=N, 60 rounds), a
//     Hold pool's discovery script with --discovery (the pool's image,
//     kubefarm.mode=discover, no boot secret), else 404. The
//     image is the machine's status.servedImage, falling back to
//     spec.desiredImage only before the rollout controller has pinned one
//     (see ImageFor). The image's artifacts are cached before the script is
//     returned, so the script never names a file that would 404.
//   - /artifacts/sha256:<64 hex>: a cached kernel, initrd or rootfs, with
//     Range, If-None-Match (the ETag is the digest) and sendfile, marked
//     immutable since the name is the content's hash.
//   - /ipxe/<binary>: the iPXE binaries for UEFI HTTP boot, with the same
//     allow-list as the TFTP service (bootpaths.Binaries).
//   - /secret/<mac> (GET only): the boot's secret (package bootsecret), a
//     newc cpio the script loads as a second initrd. Only to the machine's
//     leased IP, and only when this replica answered the DHCP request of
//     the machine's iPXE within the boot window (BootWindows.Arm), once per
//     such answer. Its hash goes into status.bootCredential before the
//     archive is sent. Serving the script opens nothing.
//   - /config/<mac>: the machine's node configuration and join token, for
//     kubefarm-agent. Only to the machine's leased IP, for its MAC, with
//     the secret of the boot this replica issued (Authorization: Bearer),
//     inside that boot's window, once; every other request gets the same
//     403.
//     With Tenants set it also carries the tenant's API server, CA, DNS
//     and pod network (TenantFacts).
//   - POST /report and POST /heartbeat carry the boot's secret too, checked
//     against status.bootCredential (or this replica's memory of the boot
//     it issued the secret for, while the cache catches up).
//   - POST /report: the agent's boot ID, image digest and CNI chain
//     verdict, recorded in the Machine's status.lastBoot and its
//     NetworkVerified condition in one write (BootRecorder), again only
//     from the machine's leased IP; a failed verdict is also a Warning
//     event (NetworkUnverified). A new boot's write also makes the
//     RebootRequired condition False (NewBoot) if the machine has one, so a
//     True never outlives its boot.
//   - POST /heartbeat: the running agent's {"mac", "bootID",
//     "rebootRequired": {"reason", "message"} (optional)}, at most 2 KiB,
//     again only from the machine's leased IP (same refusals as /report).
//     The answer, {"reboot": true|false}, comes from the cache alone:
//     true exactly when status.rollout.phase is Rebooting and
//     status.rollout.previousBootID is the heartbeat's boot ID, so a
//     machine that has rebooted is never asked again. A heartbeat writes
//     only to raise RebootRequired (reason InteractiveLogin or
//     RebootRequiredFile, message "boot <id>: ..."): for the boot of
//     status.lastBoot, when the condition is not True for that boot yet,
//     with one server-side apply of that condition alone under FieldOwner
//     (RequireReboot). Thousands of nodes beating every 15 s cost no API
//     writes.
//   - POST /discovery (with --discovery): a discovery boot's hardware
//     report, at most MaxDiscoveryReport bytes of strict JSON within the
//     DiscoveredMachine type's bounds, only from the address a catch-all
//     range leases to the report's MAC; recorded as the DiscoveredMachine
//     of the MAC under a cap, a rate of new objects and a rate per source
//     (discovery.go, docs/discovery.md). A MAC a Machine claims is answered
//     {"enrolled": true}.
//
// /healthz and /metrics are not on the boot network: Handler.Probes serves
// them for a listener of their own (kubefarm-pxe's --metrics-addr).
//
// Store is the content-addressed cache: downloads go to a temporary file,
// are verified against their sha256 and only then linked into place, never
// over an existing digest; concurrent requests for one digest share one
// download. Artifacts come from an OCI repository's blobs (by digest) or
// from plain HTTP(S) URLs.
//
// Machines abstracts the lookups; CacheMachines implements it with
// Machines from pxe/inventory (one map read by MAC or IP whatever the
// number of machines) and NodePools and BootImages from a
// controller-runtime cache.
package httpboot

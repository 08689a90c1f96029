#!/usr/bin/env bash
# Build the kubefarm node image: vmlinuz, initrd, rootfs.squashfs and
# manifest.json, from Debian packages (mmdebstrap) and the pinned binaries
# the Makefile builds. Root, no Docker (the Dockerfile next to this runs the
# same script). `make node-image` is the usual way in.
#
# Output: $KUBEFARM_CACHE/node-image/<key>/ (default /var/cache/kubefarm),
# where <key> is a sha256 over every input (see cache_key below). A build
# whose key is already there does nothing and prints the path; a build
# writes into a temporary folder and renames it into place at the end, so
# an interrupted build leaves no half entry.
#
# Inputs (environment):
#   KUBELET       kubelet binary (default $REPO/bin/kubelet; required)
#   FLANNELD      flanneld binary (default $REPO/bin/flanneld; required)
#   FLANNEL_CNI   flannel CNI plugin (default $REPO/bin/cni/flannel; required)
#   CONTAINERD_BIN folder with containerd, containerd-shim-runc-v2, ctr and runc
#                 (default $REPO/bin; required: make bin/containerd bin/runc ...)
#   AGENT         kubefarm-agent binary (default $REPO/bin/kubefarm-agent; optional:
#                 when absent nothing is installed and the manifest says agent: none)
#   CNI_CHAIN_DIR extra CNI plugins to chain after bandwidth (optional; a service
#                 mesh's, say): one folder per plugin, <name>/plugin (the binary,
#                 installed as /usr/lib/cni/<name>) and <name>/entry.json (its
#                 conflist entry, "type": "<name>"), appended in name order; see
#                 README.md, "Chaining another CNI plugin"
#   ARCH          the machines' Debian architecture: amd64 (default) or arm64. For
#                 another architecture than the build machine's, every binary above
#                 must be built for it (make node-image-arm64 cross-builds them),
#                 the packages' scripts and the checks below run under qemu-user
#                 (binfmt_misc; Debian's qemu-user-static), and the kernel and
#                 busybox come from hack/apt-download-arch
#   BUSYBOX       the initrd's busybox (default /bin/busybox, or ARCH's busybox-static)
#   KUBEFARM_CACHE, SUITE, MIRROR, KERNEL_PACKAGE, SOURCE_DATE_EPOCH (pins below)
#   KEEP_WORK=1   keep the temporary folder of a failed build
set -euo pipefail
umask 022
export LC_ALL=C.UTF-8 TZ=UTC

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"

# ---- pins: the one place they are set -------------------------------------
ARCH="${ARCH:-amd64}"
SUITE="${SUITE:-bookworm}"
# The suites of one release the packages come from: security fixes and
# updates included. Without a snapshot mirror (snapshot.debian.org is not
# reachable from the build machine) package versions are whatever this
# mirror serves at build time; manifest.json lists them.
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
KERNEL_PACKAGE="${KERNEL_PACKAGE:-linux-image-6.1.0-56-$ARCH}"
# Every time stamp in every artifact (2025-01-01T00:00:00Z).
SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-1735689600}"
SQUASHFS_COMP=(-comp zstd -Xcompression-level 15)
export SOURCE_DATE_EPOCH

KUBELET="${KUBELET:-$REPO/bin/kubelet}"
FLANNELD="${FLANNELD:-$REPO/bin/flanneld}"
FLANNEL_CNI="${FLANNEL_CNI:-$REPO/bin/cni/flannel}"
AGENT="${AGENT:-$REPO/bin/kubefarm-agent}"
CONTAINERD_BIN="${CONTAINERD_BIN:-$REPO/bin}"
RUNTIME_BINARIES=(containerd containerd-shim-runc-v2 ctr runc)
CACHE="${KUBEFARM_CACHE:-/var/cache/kubefarm}/node-image"
GO="${GO:-go}"

log() { printf '%s node-image: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'node-image: error: %s\n' "$*" >&2; exit 1; }
sha() { sha256sum "$1" | cut -d' ' -f1; }

# ---- prerequisites --------------------------------------------------------
[ "$(id -u)" = 0 ] || die "run as root (mmdebstrap --mode=root, chroot, mknod)"
for t in mmdebstrap mksquashfs unsquashfs apt-get dpkg-deb depmod modprobe "$GO" sha256sum tar; do
	command -v "$t" >/dev/null || die "$t not found (make node-image installs mmdebstrap squashfs-tools kmod busybox-static)"
done
case "$ARCH" in amd64) GOARCH_TARGET=amd64 ;; arm64) GOARCH_TARGET=arm64 ;; *) die "ARCH=$ARCH: kubefarm's node image is built for amd64 and arm64" ;; esac
HOST_ARCH="$(dpkg --print-architecture)"
# Debian packages of ARCH: the host's own apt for its architecture, a
# private apt state for another (hack/apt-download-arch) so that the host's
# dpkg never carries a foreign architecture.
apt_download() { # $1: folder, $2: package; prints the .deb's path
	if [ "$ARCH" = "$HOST_ARCH" ]; then
		(cd "$1" && apt-get download "$2" >/dev/null) || return 1
		find "$1" -maxdepth 1 -name "${2}_*_${ARCH}.deb" | sort | tail -n1
	else
		"$REPO/hack/apt-download-arch" "$ARCH" "$1" "$2"
	fi
}
if [ "$ARCH" != "$HOST_ARCH" ]; then
	# The packages' maintainer scripts and the chroot checks below run
	# ARCH's programs: the kernel must hand them to qemu-user.
	qemu_arch="$(case "$ARCH" in arm64) echo aarch64 ;; *) echo "$ARCH" ;; esac)"
	[ -e "/proc/sys/fs/binfmt_misc/qemu-$qemu_arch" ] ||
		die "ARCH=$ARCH on a $HOST_ARCH machine needs binfmt_misc's qemu-$qemu_arch (apt-get install qemu-user-static binfmt-support; update-binfmts --enable qemu-$qemu_arch)"
	if [ -z "${BUSYBOX:-}" ]; then
		mkdir -p "$CACHE/debs-$ARCH"
		bbdeb="$(apt_download "$CACHE/debs-$ARCH" busybox-static)" || die "busybox-static for $ARCH: apt-download-arch failed"
		bbx="$CACHE/debs-$ARCH/busybox-static.extract"
		rm -rf "$bbx" && dpkg-deb -x "$bbdeb" "$bbx"
		BUSYBOX="$bbx/bin/busybox"
	fi
fi
BUSYBOX="${BUSYBOX:-/bin/busybox}"
[ -x "$BUSYBOX" ] || die "$BUSYBOX missing (install busybox-static)"
file_is_static() { ! LC_ALL=C readelf -l "$1" 2>/dev/null | grep -q 'Requesting program interpreter'; }
if command -v readelf >/dev/null; then file_is_static "$BUSYBOX" || die "$BUSYBOX is dynamically linked: install busybox-static"; fi
[ -x "$KUBELET" ] || die "kubelet not found at $KUBELET: build it first (make bin/kubelet, part of make tools) or set KUBELET="
[ -x "$FLANNELD" ] || die "flanneld not found at $FLANNELD: make bin/flanneld, or set FLANNELD="
[ -x "$FLANNEL_CNI" ] || die "flannel CNI plugin not found at $FLANNEL_CNI: make bin/cni/flannel, or set FLANNEL_CNI="
for b in "${RUNTIME_BINARIES[@]}"; do
	[ -x "$CONTAINERD_BIN/$b" ] || die "$b not found in $CONTAINERD_BIN: make bin/$b (hack/tools/containerd, hack/tools/runc), or set CONTAINERD_BIN="
	file_is_static "$CONTAINERD_BIN/$b" || die "$CONTAINERD_BIN/$b is dynamically linked: the node image takes static builds (make bin/$b)"
done
if [ -e "$AGENT" ]; then
	[ -x "$AGENT" ] || die "$AGENT is not executable"
else
	AGENT=""
fi
CHAIN=()
if [ -n "${CNI_CHAIN_DIR:-}" ]; then
	CNI_CHAIN_DIR="$(cd "$CNI_CHAIN_DIR" && pwd)" || die "CNI_CHAIN_DIR: no such folder"
	mapfile -t CHAIN < <(cd "$CNI_CHAIN_DIR" && find . -mindepth 1 -maxdepth 1 -printf '%f\n' | sort)
	[ "${#CHAIN[@]}" -gt 0 ] || die "CNI_CHAIN_DIR $CNI_CHAIN_DIR is empty"
	for n in "${CHAIN[@]}"; do
		[[ "$n" =~ ^[A-Za-z0-9._-]{1,64}$ && "$n" != . && "$n" != .. ]] || die "CNI_CHAIN_DIR: $n is no plugin name ([A-Za-z0-9._-], at most 64)"
		[ -d "$CNI_CHAIN_DIR/$n" ] || die "CNI_CHAIN_DIR: $n is not a folder"
		[ -f "$CNI_CHAIN_DIR/$n/plugin" ] && [ -x "$CNI_CHAIN_DIR/$n/plugin" ] || die "CNI_CHAIN_DIR: $n/plugin is not an executable file"
		[ -f "$CNI_CHAIN_DIR/$n/entry.json" ] || die "CNI_CHAIN_DIR: $n/entry.json missing"
	done
fi

mkdir -p "$CACHE"
tools="$(mktemp -d "$CACHE/.tools.XXXXXX")"
work=""
built=""
cleanup() {
	rm -rf "$tools"
	if [ -n "$work" ] && [ -d "$work" ]; then
		if [ -z "$built" ] && [ "${KEEP_WORK:-}" = 1 ]; then log "kept $work"; else rm -rf "$work"; fi
	fi
}
trap cleanup EXIT

# ---- the Go tools (deterministic builds: their bytes go into the key) -----
log "building the Go tools"
# nodeimage runs here; kubefarm-fetch (the initrd's) and pause (the
# preloaded sandbox image's) run on the machines.
(cd "$REPO" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false "$GO" build -trimpath -ldflags '-s -w' -o "$tools/" ./images/node/cmd/nodeimage)
(cd "$REPO" && CGO_ENABLED=0 GOARCH="$GOARCH_TARGET" GOFLAGS=-buildvcs=false "$GO" build -trimpath -ldflags '-s -w' -o "$tools/" \
	./images/node/cmd/kubefarm-fetch ./e2e/images/pause)
NODEIMAGE="$tools/nodeimage"

# ---- the cache key ---------------------------------------------------------
# Everything that decides the output: this recipe (every file in this folder
# but tests and docs), the pins, the bytes of every binary that goes in, and
# the versions of the host tools that write the artifacts. Not in it: the
# package versions the mirror serves (see MIRROR above).
cache_key() {
	{
		echo "arch $ARCH"
		echo "suite $SUITE"
		echo "mirror $MIRROR $SECURITY_MIRROR"
		echo "kernel $KERNEL_PACKAGE"
		echo "source-date-epoch $SOURCE_DATE_EPOCH"
		echo "squashfs ${SQUASHFS_COMP[*]}"
		(cd "$HERE" && find . -type f ! -name '*_test.go' ! -name '*.md' ! -name Dockerfile ! -name boot-test.sh ! -name secret-check.sh ! -path './cmd/*' ! -path './fetch/*' ! -name '*.go' -print0 |
			sort -z | xargs -0 sha256sum)
		echo "kubelet $(sha "$KUBELET")"
		echo "flanneld $(sha "$FLANNELD")"
		echo "flannel-cni $(sha "$FLANNEL_CNI")"
		for b in "${RUNTIME_BINARIES[@]}"; do echo "$b $(sha "$CONTAINERD_BIN/$b")"; done
		echo "agent ${AGENT:+$(sha "$AGENT")}"
		# Only when set, so that without it the key is what it was.
		for n in "${CHAIN[@]}"; do
			echo "cni-chain $n plugin $(sha "$CNI_CHAIN_DIR/$n/plugin") entry $(sha "$CNI_CHAIN_DIR/$n/entry.json")"
		done
		echo "busybox $(sha "$BUSYBOX")"
		for b in nodeimage kubefarm-fetch pause; do echo "$b $(sha "$tools/$b")"; done
		echo "mmdebstrap $(mmdebstrap --version)"
		echo "mksquashfs $(mksquashfs -version 2>&1 | head -n1)"
		echo "depmod $(depmod --version | head -n1)"
	}
}
KEY="$(cache_key | sha256sum | cut -c1-32)"
OUT="$CACHE/$KEY"
if [ -f "$OUT/manifest.json" ]; then
	log "cached, nothing to do"
	echo "$OUT"
	exit 0
fi
log "building $KEY"
start=$SECONDS
work="$(mktemp -d "$CACHE/.build-$KEY.XXXXXX")"
root="$work/root"
art="$work/out"
mkdir -p "$root" "$art"

# ---- the Debian root file system (cached by its own inputs) --------------
mapfile -t PACKAGES < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$HERE/packages.txt" | sort -u)
include="$(IFS=,; echo "${PACKAGES[*]}")"
# amd64's key leaves the architecture out, as it did before arm64 existed,
# so that caches of it stay valid.
arch_key=""
[ "$ARCH" = amd64 ] || arch_key="arch $ARCH"
base_key="$(printf '%s\n' "$SUITE" "$MIRROR" "$SECURITY_MIRROR" "$SOURCE_DATE_EPOCH" "$include" "$(mmdebstrap --version)" merged-usr-hook $arch_key | sha256sum | cut -c1-32)"
base="$CACHE/base/$base_key.tar"
if [ ! -f "$base" ]; then
	log "mmdebstrap $SUITE $ARCH with ${#PACKAGES[@]} packages"
	mkdir -p "$CACHE/base"
	t0=$SECONDS
	# The merged-usr hook makes /bin, /lib and /sbin links itself and
	# installs usr-is-merged, where bookworm's default pulls in usrmerge
	# and with it perl (9 MiB of every boot's download, never run).
	mmdebstrap --mode=root --variant=minbase --format=tar --architectures="$ARCH" \
		--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
		--include="$include" \
		--aptopt='Acquire::Languages "none"' \
		--dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		--dpkgopt='path-exclude=/usr/share/info/*' \
		--customize-hook='rm -f "$1"/etc/machine-id "$1"/var/lib/dbus/machine-id' \
		--customize-hook='touch "$1"/etc/machine-id' \
		"$SUITE" "$base.tmp" \
		"deb $MIRROR $SUITE main" \
		"deb $MIRROR $SUITE-updates main" \
		"deb $SECURITY_MIRROR $SUITE-security main"
	mv "$base.tmp" "$base"
	log "mmdebstrap took $((SECONDS - t0)) s"
else
	log "base root file system cached: $base"
fi
tar -C "$root" --numeric-owner --xattrs --xattrs-include='*' -xpf "$base"

# ---- the kernel and its modules -------------------------------------------
debs="$CACHE/debs"
mkdir -p "$debs"
kdeb="$(find "$debs" -maxdepth 1 -name "${KERNEL_PACKAGE}_*_${ARCH}.deb" | sort | tail -n1)"
if [ -z "$kdeb" ]; then
	log "downloading $KERNEL_PACKAGE ($ARCH)"
	kdeb="$(apt_download "$debs" "$KERNEL_PACKAGE")" && [ -n "$kdeb" ] ||
		die "apt-get download $KERNEL_PACKAGE ($ARCH) failed (apt-get update? is it still in $SUITE? apt-cache policy $KERNEL_PACKAGE)"
fi
KERNEL_VERSION="$(dpkg-deb -f "$kdeb" Version)"
kx="$work/kernel"
dpkg-deb -x "$kdeb" "$kx"
RELEASE="$(ls "$kx/lib/modules")"
[ "$(echo "$RELEASE" | wc -l)" = 1 ] || die "$kdeb has several module trees: $RELEASE"
cp "$kx/boot/vmlinuz-$RELEASE" "$art/vmlinuz"
depmod -b "$kx" "$RELEASE"

# Modules of the root file system: all but the folders modules-exclude.txt names.
mkdir -p "$root/lib/modules"
cp -a "$kx/lib/modules/$RELEASE" "$root/lib/modules/"
sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$HERE/modules-exclude.txt" | while read -r d; do
	rm -rf "${root:?}/lib/modules/$RELEASE/kernel/$d"
done
depmod -b "$root" "$RELEASE"
MODULES_ALWAYS="$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$HERE/rootfs/etc/modules-load.d/kubefarm.conf" | paste -sd,)"
MODULES_IPVS="ip_vs,ip_vs_rr,ip_vs_wrr,ip_vs_sh"
for m in ${MODULES_ALWAYS//,/ } ${MODULES_IPVS//,/ }; do
	modprobe -d "$root" -S "$RELEASE" --show-depends "$m" >/dev/null 2>&1 ||
		die "module $m is not in the root file system's modules ($KERNEL_PACKAGE)"
done

# ---- what kubefarm adds ----------------------------------------------------
(cd "$HERE/rootfs" && find . -type d -print0 | sort -z | while IFS= read -r -d '' d; do
	install -d -m 0755 "$root/$d"
done)
(cd "$HERE/rootfs" && find . -type f -print0 | sort -z | while IFS= read -r -d '' f; do
	install -m 0644 "$f" "$root/$f"
done)
install -m 0755 "$KUBELET" "$root/usr/bin/kubelet"
install -m 0755 "$FLANNELD" "$root/usr/bin/flanneld"
install -m 0755 "$FLANNEL_CNI" "$root/usr/lib/cni/flannel"
# containerd 2.x and runc, built from their Go modules (not Debian's 1.6).
for b in "${RUNTIME_BINARIES[@]}"; do
	install -m 0755 "$CONTAINERD_BIN/$b" "$root/usr/bin/$b"
done
# kubefarm-agent (hook point: the agent is built elsewhere; without it the
# image boots to containerd and waits, and the manifest says agent: none).
if [ -n "$AGENT" ]; then
	install -m 0755 "$AGENT" "$root/usr/bin/kubefarm-agent"
fi
install -d -m 0755 "$root/usr/share/kubefarm/images" "$root/etc/kube-flannel" "$root/etc/kubernetes" "$root/var/lib/kubelet" "$root/var/lib/containerd"
"$NODEIMAGE" pause-image -arch "$GOARCH_TARGET" -binary "$tools/pause" -mtime "$SOURCE_DATE_EPOCH" -o "$root/usr/share/kubefarm/images/pause.tar"
# flanneld links glibc dynamically: its version is asked in the root it
# runs in (for another architecture the host has no loader for it).
FLANNEL_VERSION_LINE="$(chroot "$root" /usr/bin/flanneld --version 2>&1 | head -n1)" ||
	die "flanneld does not run in the root file system (built against another glibc?)"
# The CNI plugins the image's conflist chains, and containerd's loopback:
# the rest of Debian's set (dhcp, macvlan, vlan, tuning, firewall, ...) is
# never run here and costs 7 MiB of every boot's download. CNI_CHAIN_DIR
# brings any other plugin with its own binary.
NODE_CNI_PLUGINS="bridge host-local loopback portmap bandwidth flannel"
for p in $NODE_CNI_PLUGINS; do
	[ -x "$root/usr/lib/cni/$p" ] || die "CNI plugin $p missing from /usr/lib/cni"
done
for f in "$root"/usr/lib/cni/*; do
	case " $NODE_CNI_PLUGINS " in *" $(basename "$f") "*) ;; *) rm -f "$f" ;; esac
done
chroot "$root" systemctl enable --quiet containerd.service kubefarm-preload-images.service kubelet.service \
	flanneld.service kubefarm-agent.service systemd-networkd.service systemd-resolved.service
# Units a diskless node never needs, masked (TestBuiltImage reads this
# list and checks each is masked): each is a fork and exec, or a module load,
# while the one CPU of a slow machine starts the kubelet's path (the boot
# figures in docs/nodes.md). Its packages come from the image, not apt; its
# root is tmpfs (no e2scrub, no fstrim, no random seed to keep: the kernel
# seeds itself); no pstore, DRM, FUSE, configfs or device mapper at boot (a
# workload that loads one of those modules still can); the initrd loaded
# loop for the root; no ip= on the command line for the network generator;
# kube-proxy programs IPVS itself (ipvsadm's init script only restores
# rules it saved, and the package is there for its command).
MASKED_UNITS="apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer e2scrub_reap.service
	fstrim.timer systemd-pstore.service modprobe@efi_pstore.service modprobe@drm.service modprobe@fuse.service
	modprobe@dm_mod.service sys-fs-fuse-connections.mount modprobe@configfs.service sys-kernel-config.mount
	modprobe@loop.service systemd-random-seed.service systemd-network-generator.service ipvsadm.service"
# shellcheck disable=SC2086 # a list of unit names
chroot "$root" systemctl mask --quiet $MASKED_UNITS
ln -sf /run/systemd/resolve/resolv.conf "$root/etc/resolv.conf"
# Extra CNI plugins (CNI_CHAIN_DIR), chained into the one conflist here, at
# build time, rather than by their own installer racing it at node start.
if [ "${#CHAIN[@]}" -gt 0 ]; then
	entries=()
	for n in "${CHAIN[@]}"; do
		[ ! -e "$root/usr/lib/cni/$n" ] || die "CNI_CHAIN_DIR: /usr/lib/cni/$n is already in the image"
		install -m 0755 "$CNI_CHAIN_DIR/$n/plugin" "$root/usr/lib/cni/$n"
		entries+=("$CNI_CHAIN_DIR/$n/entry.json")
	done
	"$NODEIMAGE" chain -conflist "$root/etc/cni/net.d/10-kubefarm.conflist" -o "$root/etc/cni/net.d/10-kubefarm.conflist" \
		-types "$(IFS=,; echo "${CHAIN[*]}")" "${entries[@]}"
	log "chained CNI plugins: ${CHAIN[*]}"
fi
# The record of the image's own CNI chain, which kubefarm-agent checks the
# node against at every boot (agent/cnicheck).
"$NODEIMAGE" cni-record -root "$root" -o "$root/usr/share/kubefarm/cni.json"

# Leave nothing that varies between builds or belongs to one machine.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/ldconfig/aux-cache \
	"$root"/var/log/* "$root"/var/lib/systemd/random-seed "$root"/etc/hostname \
	"$root"/etc/ssh/ssh_host_* "$root"/tmp/* "$root"/var/tmp/*
: >"$root/etc/machine-id"
find "$root" -name '*.pyc' -delete

# ---- the root file system ---------------------------------------------------
log "mksquashfs"
t0=$SECONDS
# SOURCE_DATE_EPOCH in the environment would clash with the explicit times.
env -u SOURCE_DATE_EPOCH mksquashfs "$root" "$art/rootfs.squashfs" -noappend -reproducible -quiet -no-progress \
	"${SQUASHFS_COMP[@]}" -mkfs-time "$SOURCE_DATE_EPOCH" -all-time "$SOURCE_DATE_EPOCH" -xattrs >/dev/null
log "mksquashfs took $((SECONDS - t0)) s"

# ---- the initrd -------------------------------------------------------------
ird="$work/initrd"
install -d -m 0755 "$ird"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,run,newroot,etc/kubefarm,lib/modules/"$RELEASE"}
install -m 0755 "$BUSYBOX" "$ird/bin/busybox"
install -m 0755 "$tools/kubefarm-fetch" "$ird/bin/kubefarm-fetch"
install -m 0755 "$HERE/initrd/init" "$ird/init"
install -m 0755 "$HERE/initrd/udhcpc.script" "$ird/etc/kubefarm/udhcpc.script"
: >"$ird/etc/kubefarm/modules.order"
kmod_copy() { # $1: module; prints the paths modprobe would insmod, copies them
	modprobe -d "$kx" -S "$RELEASE" --show-depends "$1" | awk '$1 == "insmod" {print $2}' | while read -r p; do
		rel="${p#"$kx/lib/modules/$RELEASE/"}"
		install -D -m 0644 "$p" "$ird/lib/modules/$RELEASE/$rel"
		echo "$rel"
	done
}
while read -r kind m; do
	case "$kind" in
	boot) kmod_copy "$m" >>"$ird/etc/kubefarm/modules.order" ;;
	nic) kmod_copy "$m" >/dev/null ;;
	""|\#*) ;;
	*) die "initrd/modules.txt: unknown kind $kind" ;;
	esac
done <"$HERE/initrd/modules.txt"
# One entry per module, first load first.
awk '!seen[$0]++' "$ird/etc/kubefarm/modules.order" >"$ird/etc/kubefarm/modules.order.tmp"
mv "$ird/etc/kubefarm/modules.order.tmp" "$ird/etc/kubefarm/modules.order"
for f in modules.order modules.builtin modules.builtin.modinfo; do
	[ -f "$kx/lib/modules/$RELEASE/$f" ] && cp "$kx/lib/modules/$RELEASE/$f" "$ird/lib/modules/$RELEASE/"
done
depmod -b "$ird" "$RELEASE"
# depmod's binary indexes are not needed by busybox modprobe; keep the text ones.
rm -f "$ird/lib/modules/$RELEASE"/*.bin
"$NODEIMAGE" initrd -dir "$ird" -mtime "$SOURCE_DATE_EPOCH" -o "$art/initrd"

# ---- manifest, then into place ---------------------------------------------
"$NODEIMAGE" manifest -arch "$ARCH" -out "$art" -root "$root" -key "$KEY" -suite "$SUITE" -mirror "$MIRROR" \
	-source-date-epoch "$SOURCE_DATE_EPOCH" -kernel-package "$KERNEL_PACKAGE" -kernel-version "$KERNEL_VERSION" \
	-kernel-release "$RELEASE" -kernel-deb "$kdeb" \
	-kubelet-version "$("$KUBELET" --version | awk '{print $2}')" \
	-containerd-version "$("$CONTAINERD_BIN/containerd" --version | awk '{print $3}')" \
	-runc-version "$("$CONTAINERD_BIN/runc" --version | awk 'NR==1{print $3}')" \
	-flannel-version "$FLANNEL_VERSION_LINE cni-plugin $(sed -nE 's#^require github.com/containernetworking/plugins (v[^ ]+).*#\1#p' "$REPO/hack/tools/flannel/cni/go.mod")" \
	-modules "$MODULES_ALWAYS" -modules-ipvs "$MODULES_IPVS"
"$NODEIMAGE" verify "$art" >&2
mv -T "$art" "$OUT" 2>/dev/null || {
	# Someone else finished the same key first: theirs is as good as ours.
	[ -f "$OUT/manifest.json" ] || die "cannot move the image into $OUT"
}
built=1
log "built in $((SECONDS - start)) s"
echo "$OUT"

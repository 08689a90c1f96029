#!/usr/bin/env bash
# Cross-build the arm64 UEFI iPXE that kubefarm-pxe serves to ARM64 machines
# (DHCP client architecture 11: pxe/bootpaths.BinaryUEFIARM64). Debian's
# ipxe package ships only x86 binaries; this builds the arm64 one from the
# source of the same package version, so that x86 and arm64 machines run
# the same iPXE. `make ipxe-arm64` is the usual way in.
#
#   hack/tools/ipxe/build.sh [--check-reproducible] OUT
#
# Writes OUT (bin/ipxe/ipxe-arm64.efi) and prints its sha256.
# --check-reproducible builds a second time in another folder and fails
# unless both builds are the same bytes.
#
# The source is Debian bookworm's ipxe orig tarball (upstream commit
# 36a4c85, 2019-01-25), pinned by sha256, checked before every use, cached
# under $KUBEFARM_CACHE/ipxe-src (default /var/cache/kubefarm). A mirror
# that does not serve it (the build fails and says so) can be got round in
# either of two ways: put the tarball into that folder (its sha256 still
# gates it), or set IPXE_GIT to a clone of upstream iPXE, from which the
# build takes the same commit, pinned by its full id. Debian's tarball is
# that commit's tree less some files, so the two sources are not claimed to
# give the same bytes; the script says which one it used.
set -euo pipefail
# Command substitutions ($(build ...)) stop at a failure too.
shopt -s inherit_errexit
umask 022
export LC_ALL=C TZ=UTC

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"

# ---- pins -------------------------------------------------------------------
# The version of Debian's ipxe package whose x86 binaries kubefarm-pxe serves
# (bookworm: 1.0.0+git-20190125.36a4c85-5.1).
IPXE_VERSION=1.0.0+git-20190125.36a4c85
TARBALL="ipxe_${IPXE_VERSION}.orig.tar.xz"
TARBALL_URL="${IPXE_MIRROR:-http://deb.debian.org/debian}/pool/main/i/ipxe/${TARBALL}"
TARBALL_SHA256=3ae46008c5f0910665569928e18d171b02bcb210e9fc191dc19dd0d9ae59ee42
# The upstream commit that tarball was cut from, for IPXE_GIT.
IPXE_COMMIT=36a4c85f911c85f5ab183331ff74d125f9a9ed32
# What iPXE would otherwise make up at each build: its build ID is a random
# number (BUILD_ID_CMD runs perl's rand) and its timestamp the build's date.
# Pinned to the commit's first 32 bits and its commit time (2019-01-25
# 14:53:43 UTC), they make two builds the same bytes.
BUILD_ID=0x36a4c85f
BUILD_TIMESTAMP=1548428023

CACHE="${KUBEFARM_CACHE:-/var/cache/kubefarm}/ipxe-src"
WORK="$REPO/_build/ipxe-arm64"
JOBS="${IPXE_JOBS:-2}"

log() { printf '%s ipxe-arm64: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'ipxe-arm64: error: %s\n' "$*" >&2; exit 1; }

check=
if [ "${1:-}" = --check-reproducible ]; then
	check=1
	shift
fi
[ "$#" = 1 ] || die "usage: $0 [--check-reproducible] OUT"
OUT="$1"

for t in aarch64-linux-gnu-gcc gcc make perl xz tar sha256sum; do
	command -v "$t" >/dev/null || die "$t not found (make ipxe-arm64 installs crossbuild-essential-arm64 gcc make perl xz-utils curl)"
done

# source_tarball prints the cached tarball's path, downloading it first when
# it is missing; a cached file whose sha256 is wrong is replaced.
source_tarball() {
	local f="$CACHE/$TARBALL"
	mkdir -p "$CACHE"
	if [ -e "$f" ] && [ "$(sha256sum "$f" | cut -d' ' -f1)" != "$TARBALL_SHA256" ]; then
		log "$f has the wrong sha256; fetching it again"
		rm -f "$f"
	fi
	if [ ! -e "$f" ]; then
		command -v curl >/dev/null || die "curl not found"
		log "fetching $TARBALL_URL"
		curl -fsSL --retry 3 -o "$f.partial" "$TARBALL_URL" ||
			die "cannot fetch $TARBALL_URL: put the file into $CACHE (its sha256 is checked), or set IPXE_GIT to a clone of iPXE holding commit $IPXE_COMMIT"
		mv "$f.partial" "$f"
	fi
	# Checked before every use, not only after the download.
	local got
	got="$(sha256sum "$f" | cut -d' ' -f1)"
	[ "$got" = "$TARBALL_SHA256" ] || die "$f: sha256 $got, want $TARBALL_SHA256"
	echo "$f"
}

# unpack DIR lays the pinned source out in DIR (fresh).
unpack() {
	rm -rf "$1"
	mkdir -p "$1"
	if [ -n "${IPXE_GIT:-}" ]; then
		[ "$(git -C "$IPXE_GIT" rev-parse --verify --quiet "$IPXE_COMMIT^{commit}")" = "$IPXE_COMMIT" ] ||
			die "IPXE_GIT=$IPXE_GIT has no commit $IPXE_COMMIT"
		git -C "$IPXE_GIT" archive --format=tar "$IPXE_COMMIT" | tar -x -C "$1"
	else
		local tb
		tb="$(source_tarball)"
		# The tarball's top folder is named after Debian's packaging.
		tar -x -J -f "$tb" -C "$1" --strip-components=1
	fi
	[ -f "$1/src/Makefile" ] || die "the source has no src/Makefile"
}

# build DIR unpacks and builds into DIR and prints the binary's path.
build() {
	unpack "$1"
	# Debian's x86 binaries, which this one stands beside, are built with
	# IPv6 and NFS (both in their Features list); upstream's defaults
	# (src/config/general.h) leave them out, and an arm64 machine could not
	# boot over IPv6 as an x86 one can. src/config/local/ is iPXE's place
	# for a build's own settings; the source leaves it empty.
	printf '#define NET_PROTO_IPV6\n#define DOWNLOAD_PROTO_NFS\n' >"$1/src/config/local/general.h"
	log "building bin-arm64-efi/snp.efi in $1 (make -j$JOBS)"
	# bin-arm64-efi/snp.efi: the ARM64 EFI application that drives the NIC
	# through the firmware's Simple Network Protocol, so it works on any
	# NIC the firmware drives, as snponly.efi does on x86 (ipxe.efi, with
	# iPXE's own NIC drivers, has none for most ARM servers' NICs).
	# CROSS: the cross toolchain (crossbuild-essential-arm64).
	# NO_WERROR=1: gcc 12 warns where the gcc of 2019 did not, and this
	# iPXE builds with -Werror (almost all are -Waddress-of-packed-member,
	# a warning gcc 9 added); they are counted and kept in the log.
	# HOST_CFLAGS: this iPXE adds the target's workaround flags (here
	# -mabi=lp64, an arm64-only option) to the host compiler's, which then
	# fails to build its own tools (elf2efi64) in a cross build; the host
	# tools get plain -O2 instead.
	# BUILD_ID_CMD, BUILD_TIMESTAMP: fixed, see above.
	make -C "$1/src" -j"$JOBS" bin-arm64-efi/snp.efi \
		CROSS=aarch64-linux-gnu- NO_WERROR=1 HOST_CFLAGS=-O2 \
		BUILD_ID_CMD="echo $BUILD_ID" BUILD_TIMESTAMP="$BUILD_TIMESTAMP" >"$1.log" 2>&1 ||
		{ tail -n 30 "$1.log" >&2; die "make failed; the whole log is $1.log"; }
	log "$(grep -c 'warning:' "$1.log" || true) compiler warnings, in $1.log"
	echo "$1/src/bin-arm64-efi/snp.efi"
}

start=$(date +%s)
if [ -n "${IPXE_GIT:-}" ]; then
	log "source: commit $IPXE_COMMIT of $IPXE_GIT (IPXE_GIT), not Debian's tarball"
else
	log "source: $TARBALL (sha256 $TARBALL_SHA256)"
fi
efi="$(build "$WORK/a")"
sum="$(sha256sum "$efi" | cut -d' ' -f1)"
log "built in $(($(date +%s) - start)) s: sha256 $sum"
if [ -n "$check" ]; then
	again="$(build "$WORK/b")"
	sum2="$(sha256sum "$again" | cut -d' ' -f1)"
	[ "$sum2" = "$sum" ] || die "not reproducible: the second build (another folder) is $sum2, the first $sum"
	log "reproducible: a second build in another folder is the same bytes"
fi
mkdir -p "$(dirname "$OUT")"
cp "$efi" "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "$sum  $OUT"

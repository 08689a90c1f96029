#!/usr/bin/env bash
# The arm64 UEFI iPXE that kubefarm-pxe serves to ARM64 machines (DHCP
# client architecture 11: pxe/bootpaths.BinaryUEFIARM64), taken from
# Debian's own build: bookworm's ipxe package ships only x86 binaries, and
# trixie's (an Architecture: all package, so one .deb for every host) ships
# /usr/lib/ipxe/ipxe-arm64.efi under the very name kubefarm-pxe serves.
# `make ipxe-arm64` is the usual way in.
#
#   hack/tools/ipxe/fetch-arm64.sh OUT
#
# Writes OUT (bin/ipxe/ipxe-arm64.efi) and prints its sha256.
#
# The .deb is pinned by version and sha256 (the sha256 Debian's signed
# Packages index of trixie lists for it), checked before every use, and
# cached under $KUBEFARM_CACHE/ipxe (default /var/cache/kubefarm). Why not a
# build from source: the source tarball of bookworm's package is not served
# by every mirror (this project's build machines get 404 for it), the .deb
# is, and a distribution's build of a newer iPXE (2025) boots arm64 UEFI
# firmware better than a cross-build of 2019's would. The x86 machines keep
# bookworm's iPXE (the host's ipxe package): the two differ in version, and
# the boot scripts use nothing the older one lacks.
set -euo pipefail
shopt -s inherit_errexit
umask 022
export LC_ALL=C TZ=UTC

# ---- pins -------------------------------------------------------------------
IPXE_DEB_VERSION=1.21.1+git20250501.dad20602+dfsg-1
IPXE_DEB="ipxe_${IPXE_DEB_VERSION}_all.deb"
IPXE_DEB_URL="${IPXE_MIRROR:-http://deb.debian.org/debian}/pool/main/i/ipxe/${IPXE_DEB}"
IPXE_DEB_SHA256=eeaca79dbde0fb86c102bf1d362c6f6a67ed0ddab38b3dd12e1b332339f5dd99
# The file in the package, and what it must be: a PE32+ image for ARM64
# (machine 0xaa64), which the firmware would refuse otherwise.
MEMBER=./usr/lib/ipxe/ipxe-arm64.efi

CACHE="${KUBEFARM_CACHE:-/var/cache/kubefarm}/ipxe"

log() { printf '%s ipxe-arm64: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'ipxe-arm64: error: %s\n' "$*" >&2; exit 1; }

[ "$#" = 1 ] || die "usage: $0 OUT"
OUT="$1"
for t in curl dpkg-deb sha256sum od; do
	command -v "$t" >/dev/null || die "$t not found (make ipxe-arm64 installs curl)"
done

deb="$CACHE/$IPXE_DEB"
mkdir -p "$CACHE"
if [ -e "$deb" ] && [ "$(sha256sum "$deb" | cut -d' ' -f1)" != "$IPXE_DEB_SHA256" ]; then
	log "$deb has the wrong sha256; fetching it again"
	rm -f "$deb"
fi
if [ ! -e "$deb" ]; then
	log "fetching $IPXE_DEB_URL"
	curl -fsSL --retry 3 -o "$deb.partial" "$IPXE_DEB_URL" ||
		die "cannot fetch $IPXE_DEB_URL: put the file into $CACHE (its sha256 is checked), or set IPXE_MIRROR to a Debian mirror that has it"
	mv "$deb.partial" "$deb"
fi
got="$(sha256sum "$deb" | cut -d' ' -f1)"
[ "$got" = "$IPXE_DEB_SHA256" ] || die "$deb: sha256 $got, want $IPXE_DEB_SHA256"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work" "$MEMBER" || die "$IPXE_DEB has no $MEMBER"
efi="$work/$MEMBER"
# PE: "MZ", the PE header's offset at 0x3c, "PE\0\0", then the machine.
[ "$(head -c 2 "$efi")" = MZ ] || die "$MEMBER is not a PE image"
pe="$(od -An -tu4 -j 60 -N 4 "$efi" | tr -d ' ')"
machine="$(od -An -tx2 -j $((pe + 4)) -N 2 "$efi" | tr -d ' ')"
[ "$machine" = aa64 ] || die "$MEMBER is a PE image for machine 0x$machine, not ARM64 (0xaa64)"

mkdir -p "$(dirname "$OUT")"
cp "$efi" "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
sum="$(sha256sum "$OUT" | cut -d' ' -f1)"
log "Debian's $IPXE_DEB_VERSION $MEMBER, sha256 $sum"
echo "$sum  $OUT"

#!/usr/bin/env bash
# No secret in any artifact: build the node image with known token and key
# material around (in the environment, and in a file next to the recipe),
# then search every artifact for it: vmlinuz, the initrd's uncompressed cpio,
# every file and file name of rootfs.squashfs (unsquashfs), manifest.json.
# Fails if any contains it. The file next to the recipe changes the cache
# key, so this always builds (the Debian base and kernel .deb stay cached);
# the image it builds is removed afterwards.
# With REFERENCE (the folder of a build of the same inputs without the
# secrets, as `make node-image` passes it), it is also the reproducibility
# check: the secret file changes only the cache key, so vmlinuz, initrd and
# rootfs.squashfs must have the reference's sha256, byte for byte.
# usage: secret-check.sh [REFERENCE]   (root; the same environment as build.sh)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REFERENCE="${1:-}"
# A bootstrap token's shape and a key-looking line, both unique to this test.
TOKEN="kf7q3z.c0ffee5ecre7c4ec"
KEY="KUBEFARM-SECRET-CHECK-PRIVATE-KEY-9d41b7e2a6"
secret_file="$HERE/.secret-check.key"
scratch="$(mktemp -d /tmp/kubefarm-secret-check.XXXXXX)"
out=""
cleanup() {
	rm -f "$secret_file"
	rm -rf "$scratch"
	[ -n "$out" ] && rm -rf "$out"
	true
}
trap cleanup EXIT

printf -- '-----BEGIN PRIVATE KEY-----\n%s\n-----END PRIVATE KEY-----\ntoken: %s\n' "$KEY" "$TOKEN" >"$secret_file"
out="$(KUBEFARM_TEST_SECRET="$TOKEN" KUBEFARM_JOIN_TOKEN="$TOKEN" KUBEFARM_TEST_KEY="$KEY" "$HERE/build.sh")"
echo "built $out with the secrets around; searching it" >&2
# The secret file changes only the key: the artifacts equal those of a
# build without it when the build is reproducible (cmp, byte for byte; the
# sha256s are in each build's manifest.json).
differ=0
if [ -n "$REFERENCE" ]; then
	for f in vmlinuz initrd rootfs.squashfs; do
		if ! cmp -s "$REFERENCE/$f" "$out/$f"; then
			echo "NOT REPRODUCIBLE: $f differs from the build of the same inputs in $REFERENCE (sha256s in each manifest.json)" >&2
			differ=1
		fi
	done
	if [ $differ = 0 ]; then
		echo "reproducible: vmlinuz, initrd and rootfs.squashfs are byte for byte those of $REFERENCE" >&2
	fi
fi

found=0
check() { # $1: what, $2: file or folder
	for s in "$TOKEN" "$KEY"; do
		if grep -r -a -F -q -- "$s" "$2"; then
			echo "SECRET FOUND in $1: $(grep -r -a -F -l -- "$s" "$2" | head -n 5 | tr '\n' ' ')" >&2
			found=1
		fi
	done
}
check vmlinuz "$out/vmlinuz"
check manifest.json "$out/manifest.json"
gzip -dc "$out/initrd" >"$scratch/initrd.cpio"
check "initrd (cpio)" "$scratch/initrd.cpio"
unsquashfs -q -n -d "$scratch/root" "$out/rootfs.squashfs" >/dev/null
check "rootfs.squashfs (files)" "$scratch/root"
unsquashfs -lls "$out/rootfs.squashfs" >"$scratch/listing"
check "rootfs.squashfs (names)" "$scratch/listing"
# The check itself must be able to find what it looks for.
grep -a -F -q -- "$TOKEN" "$secret_file" || { echo "secret-check: self-test failed" >&2; exit 1; }
if [ $found = 1 ] || [ $differ = 1 ]; then
	echo "secret-check: FAILED" >&2
	exit 1
fi
echo "secret-check: no token or key material in vmlinuz, initrd, rootfs.squashfs or manifest.json" >&2

#!/usr/bin/env bash
# Boot a built node image in qemu (TCG, user networking) the way a machine
# netboots it: the kernel and initrd given directly (as iPXE would load
# them), the squashfs served over HTTP with the kernel arguments
# kubefarm-pxe's script passes. Two runs:
#   1. the right digest: the initrd must download, verify and switch_root
#      into systemd, and containerd must start;
#   2. a wrong digest: the boot must stop with
#      "kubefarm: rootfs digest mismatch: want ... got ..." on the console
#      and POST a report with that error to <kubefarm.server>/report.
# usage: boot-test.sh IMAGE_DIR      (IMAGE_DIR: what build.sh printed)
# EXTRA_ARGS: more kernel arguments
# Needs qemu-system-x86_64 and python3 (the stand-in HTTP server).
set -euo pipefail
dir="$(cd "$1" && pwd)"
BOOT_TIMEOUT="${BOOT_TIMEOUT:-300}"
port="${PORT:-18088}"
logs="$(mktemp -d /tmp/kubefarm-boot-test.XXXXXX)"
want="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["artifacts"]["rootfs.squashfs"]["sha256"])' "$dir/manifest.json")"

# A stand-in for kubefarm-pxe: GET /rootfs.squashfs, POST /report (204, body logged).
python3 - "$dir" "$port" "$logs/reports" <<'EOF' &
import http.server, sys, os
d, port, reports = sys.argv[1], int(sys.argv[2]), sys.argv[3]
class H(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **k): super().__init__(*a, directory=d, **k)
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with open(reports, "ab") as f: f.write(self.path.encode() + b" " + body + b"\n")
        self.send_response(204); self.end_headers()
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
EOF
srv=$!
trap 'kill $srv 2>/dev/null; true' EXIT
sleep 1

# The boot's secret, as kubefarm-pxe serves it beside the initrd (a newc cpio
# with kubefarm/boot-secret, pxe/bootsecret), appended to the initrd: the
# kernel unpacks both archives, as when iPXE hands it the two images.
python3 - "$dir/initrd" "$logs/initrd+secret" <<'EOF'
import os, sys
def entry(ino, name, mode, data):
    n = name.encode() + b"\0"
    h = b"070701" + b"".join(b"%08X" % v for v in (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(n), 0)) + n
    h += b"\0" * (-len(h) % 4)
    return h + data + b"\0" * (-len(data) % 4)
secret = os.urandom(32).hex().encode() + b"\n"
cpio = entry(1, "kubefarm", 0o040700, b"") + entry(2, "kubefarm/boot-secret", 0o100600, secret) + entry(0, "TRAILER!!!", 0, b"")
base = open(sys.argv[1], "rb").read()
open(sys.argv[2], "wb").write(base + b"\0" * (-len(base) % 4) + cpio)
EOF

# boot NAME DIGEST UNTIL_REGEX: boot until the console matches, or time out.
boot() {
	local name=$1 digest=$2 until=$3 console="$logs/$1.console"
	# systemd stops printing unit status once a getty owns the serial
	# console; journald's copy keeps "Started containerd.service" visible.
	local args="console=ttyS0 systemd.log_color=0 systemd.journald.forward_to_console=1 kubefarm.rootfs=http://10.0.2.2:$port/rootfs.squashfs"
	args+=" kubefarm.image=sha256:$digest kubefarm.server=http://10.0.2.2:$port ${EXTRA_ARGS:-}"
	qemu-system-x86_64 -machine q35 -m 3072 -smp 1 -nographic -no-reboot -kernel "$dir/vmlinuz" -initrd "$logs/initrd+secret" \
		-append "$args" -netdev user,id=n0 -device virtio-net-pci,netdev=n0 >"$console" 2>&1 &
	local q=$! t0=$SECONDS
	while ! grep -aqE "$until" "$console"; do
		if [ $((SECONDS - t0)) -ge "$BOOT_TIMEOUT" ] || ! kill -0 $q 2>/dev/null; then
			kill $q 2>/dev/null || true
			echo "FAIL $name: no /$until/ on the console within $BOOT_TIMEOUT s; console: $console" >&2
			tail -n 30 "$console" >&2
			return 1
		fi
		sleep 1
	done
	kill $q 2>/dev/null || true
	wait $q 2>/dev/null || true
	echo "ok $name after $((SECONDS - t0)) s: $(grep -aE "$until" "$console" | head -n1 | tr -d '\r')"
}

boot good "$want" 'Started containerd.service'
grep -a 'kubefarm: rootfs sha256' "$logs/good.console" | tr -d '\r'
bad="$(printf '%064d' 0)"
boot mismatch "$bad" 'kubefarm: BOOT STOPPED'
grep -aq "kubefarm: rootfs digest mismatch: want sha256:$bad got sha256:$want" "$logs/mismatch.console" ||
	{ echo "FAIL: no digest mismatch line on the console" >&2; exit 1; }
grep -q "rootfs digest mismatch: want sha256:$bad got sha256:$want" "$logs/reports" ||
	{ echo "FAIL: no report with the mismatch reached /report" >&2; exit 1; }
echo "ok report: $(tail -n1 "$logs/reports")"
rm -rf "$logs"

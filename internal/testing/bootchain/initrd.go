package bootchain

import (
	"compress/gzip"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/kubefarm/kubefarm/internal/newc"
)

// DefaultBusybox is where Debian's busybox-static installs its binary.
const DefaultBusybox = "/bin/busybox"

// CheckStatic fails unless path is a statically linked ELF executable: the
// initrd has no C library for anything else.
func CheckStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (install busybox-static, not busybox)", path)
		}
	}
	return nil
}

// ReportLine is what /init prints on the console once kubefarm-pxe
// accepted its report; "bootchain: FAILED" starts every failure line.
const (
	ReportLine = "bootchain: report accepted"
	FailedLine = "bootchain: FAILED"
)

// BuildInitrd writes a gzip-compressed newc initramfs to w: busybox (a
// static binary), the kernel modules to load in the given order, and an
// /init that brings the first network interface up with DHCP and reports
// the boot to kubefarm-pxe with the boot's secret (see InitScript).
func BuildInitrd(w io.Writer, busybox string, modules []string) error {
	if err := CheckStatic(busybox); err != nil {
		return err
	}
	zw := gzip.NewWriter(w)
	cw := newc.NewWriter(zw, 0)
	for _, d := range []string{"bin", "sbin", "usr", "usr/bin", "usr/sbin", "dev", "proc", "sys", "tmp", "lib", "lib/modules"} {
		cw.Dir(d)
	}
	// The kernel opens /dev/console for init before anything is mounted.
	cw.Add("dev/console", 0o020600, nil, 5, 1)
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	cw.Add("bin/busybox", 0o100755, bb, 0, 0)
	cw.Add("bin/sh", 0o120777, []byte("busybox"), 0, 0)
	var names []string
	for _, m := range modules {
		b, err := os.ReadFile(m)
		if err != nil {
			return err
		}
		name := filepath.Base(m)
		cw.Add("lib/modules/"+name, 0o100644, b, 0, 0)
		names = append(names, name)
	}
	cw.Add("udhcpc.sh", 0o100755, []byte(udhcpcScript), 0, 0)
	cw.Add("init", 0o100755, []byte(InitScript(names)), 0, 0)
	if err := cw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// udhcpcScript configures the address udhcpc obtained.
const udhcpcScript = `#!/bin/sh
case "$1" in
bound|renew)
	ifconfig "$interface" "$ip" netmask "$subnet" up
	echo "bootchain: leased $ip netmask $subnet on $interface from $serverid"
	;;
esac
exit 0
`

// InitScript is the initrd's /init for modules (file names under
// /lib/modules, in load order). It reads kubefarm.server and
// kubefarm.image from the kernel command line that kubefarm-pxe's iPXE
// script sets, and POSTs {"mac","bootID","imageDigest"} to
// <kubefarm.server>/report, the API kubefarm-agent uses on a real node.
func InitScript(modules []string) string {
	return `#!/bin/busybox sh
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec >/dev/console 2>&1
log() { echo "bootchain: $*"; }
fail() { echo "` + FailedLine + `: $*"; poweroff -f; sleep 60; }
log "init running on kernel $(uname -r)"
for m in ` + strings.Join(modules, " ") + `; do
	insmod "/lib/modules/$m" || log "insmod $m failed"
done
ifc=
i=0
while [ -z "$ifc" ]; do
	for n in /sys/class/net/*; do
		n="${n##*/}"
		[ "$n" != lo ] && [ -e "/sys/class/net/$n/address" ] && ifc="$n"
	done
	[ -n "$ifc" ] && break
	i=$((i+1))
	[ $i -gt 100 ] && fail "no network interface appeared"
	sleep 0.1
done
ip link set "$ifc" up
log "interface $ifc $(cat /sys/class/net/$ifc/address)"
udhcpc -i "$ifc" -f -q -n -t 10 -T 2 -s /udhcpc.sh || fail "no DHCP lease on $ifc"
server=
image=
for a in $(cat /proc/cmdline); do
	case "$a" in
	kubefarm.server=*) server="${a#kubefarm.server=}" ;;
	kubefarm.image=*) image="${a#kubefarm.image=}" ;;
	esac
done
[ -n "$server" ] || fail "no kubefarm.server= on the kernel command line"
[ -n "$image" ] || fail "no kubefarm.image= on the kernel command line"
hp="${server#http://}"
host="${hp%%:*}"
port=80
[ "$hp" != "$host" ] && port="${hp#*:}"
# The boot's secret: kubefarm-pxe served it as a second initrd image beside
# this one (pxe/bootsecret), and the kernel unpacked both.
[ -f /kubefarm/boot-secret ] || fail "no /kubefarm/boot-secret: the second initrd image did not arrive"
secret="$(cat /kubefarm/boot-secret)"
mac="$(cat /sys/class/net/$ifc/address)"
bootid="$(cat /proc/sys/kernel/random/boot_id)"
body='{"mac":"'"$mac"'","bootID":"'"$bootid"'","imageDigest":"'"$image"'"}'
log "reporting $body to $host:$port"
n=0
while :; do
	# busybox-static's wget crashes in static glibc's NSS: write HTTP by hand.
	# nc half-closes the connection as soon as its input ends and then
	# reads the answer: kubefarm-pxe must record the boot all the same.
	printf 'POST /report HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %s\r\nConnection: close\r\n\r\n%s' \
		"$hp" "$secret" "${#body}" "$body" | nc "$host" "$port" >/tmp/resp
	status="$(head -n 1 /tmp/resp | tr -d '\r')"
	log "report answer: $status"
	case "$status" in "HTTP/1.1 204"*) break ;; esac
	n=$((n+1))
	[ $n -ge 5 ] && fail "report not accepted: $status"
	sleep 1
done
echo "` + ReportLine + `"
poweroff -f
sleep 60
`
}

package netnstest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// UdhcpcOptions tune one Udhcpc run.
type UdhcpcOptions struct {
	// Tries and Timeout are udhcpc's -t (DISCOVERs sent) and -T (seconds
	// between them); defaults 5 and 1.
	Tries, Timeout int
	// Configure makes the script set the leased address on the interface,
	// as a real client's would (replacing any address it had).
	Configure bool
	// Args are appended to udhcpc's command line, e.g. -V (vendor class)
	// or -x 0x5d:0000 (option 93, client architecture).
	Args []string
}

// Udhcpc runs busybox udhcpc once in ns on ifname: -q exits once bound,
// -n gives up when no lease comes. It returns the variables its script saw
// when bound (ip, subnet, router, dns, domain, hostname, lease, serverid,
// siaddr, boot_file, ...) and udhcpc's output. An error means no lease.
func Udhcpc(ctx context.Context, ns, ifname string, o UdhcpcOptions) (map[string]string, []byte, error) {
	if o.Tries <= 0 {
		o.Tries = 5
	}
	if o.Timeout <= 0 {
		o.Timeout = 1
	}
	dir, err := os.MkdirTemp("", "udhcpc-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	out, script := filepath.Join(dir, "env"), filepath.Join(dir, "script.sh")
	configure := ""
	if o.Configure {
		configure = `ip addr flush dev "$interface"; ip addr add "$ip/$mask" dev "$interface"; `
	}
	body := "#!/bin/sh\n" +
		`if [ "$1" = bound ] || [ "$1" = renew ]; then ` + configure +
		`env > "` + out + `.tmp" && mv "` + out + `.tmp" "` + out + `"; fi` + "\nexit 0\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		return nil, nil, err
	}
	args := append([]string{"netns", "exec", ns, "busybox", "udhcpc", "-f", "-q", "-n", "-i", ifname,
		"-t", fmt.Sprint(o.Tries), "-T", fmt.Sprint(o.Timeout), "-s", script}, o.Args...)
	b, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return nil, b, fmt.Errorf("udhcpc in %s: %w", ns, err)
	}
	f, err := os.Open(out)
	if err != nil {
		return nil, b, fmt.Errorf("udhcpc in %s exited without binding: %w", ns, err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	return env, b, sc.Err()
}

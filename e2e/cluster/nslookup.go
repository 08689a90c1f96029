package cluster

import "strings"

// NslookupAnswers are the addresses busybox nslookup printed for the name
// it was asked: the "Address:" lines after the first "Name:" line (the
// ones before it are the server's), or, in busybox before 1.28, the
// "Address N: <ip> [<name>]" lines. The e2e images carry busybox alone, so
// the cluster DNS checks read its output rather than run dig.
func NslookupAnswers(out string) []string {
	var addrs []string
	named := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case f[0] == "Name:":
			named = true
		case !named:
		case f[0] == "Address:" && len(f) >= 2:
			addrs = append(addrs, f[1])
		case f[0] == "Address" && len(f) >= 3 && strings.HasSuffix(f[1], ":"):
			addrs = append(addrs, f[2])
		}
	}
	return addrs
}

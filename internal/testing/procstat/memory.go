package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// RSS is pid's resident set now (VmRSS) and at its peak so far (VmHWM), in
// bytes; 0, 0 when the process is gone.
func RSS(pid int) (now, peak int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			now = n << 10
		case "VmHWM":
			peak = n << 10
		}
	}
	return now, peak
}

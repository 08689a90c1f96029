package render

import (
	"encoding/json"
	"path"
	"strings"
	"testing"

	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

// FuzzNetworkd: whatever network a /config answer carries, Networkd either
// refuses it or writes files inside NetworkdDir only, each line a section
// header or a key=value pair without control characters, so no name or
// value adds a line or a section of its own choosing.
func FuzzNetworkd(f *testing.F) {
	seed, _ := json.Marshal(advanced)
	f.Add(seed)
	f.Add([]byte(`{"bonds":[{"name":"bond0","members":["boot","eth1"],"mode":"802.3ad"}],"vlans":[{"name":"v","link":"bond0","id":3}],"addresses":{"v":["10.0.0.1/8"]}}`))
	f.Add([]byte(`{"links":[{"match":"eth1","mtu":9000}],"routes":[{"to":"10.1.0.0/16","via":"10.0.0.1","link":"eth1"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var n nodeconfig.Network
		if json.Unmarshal(data, &n) != nil {
			return
		}
		files, err := Networkd(&n, "eth0", "52:54:00:00:00:01")
		if err != nil {
			return
		}
		for _, file := range files {
			if path.Dir(file.Path) != NetworkdDir || strings.ContainsAny(path.Base(file.Path), "/\x00") {
				t.Fatalf("file %q outside %s", file.Path, NetworkdDir)
			}
			for _, line := range strings.Split(string(file.Data), "\n") {
				if line == "" || strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") && !strings.ContainsAny(line, "=") {
					continue
				}
				k, v, ok := strings.Cut(line, "=")
				if !ok || k == "" || strings.ContainsAny(k+v, "\r\x00[]") {
					t.Fatalf("%s: line %q is not a key=value pair", file.Path, line)
				}
			}
		}
	})
}

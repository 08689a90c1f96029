package etcdsnapshot

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/etcd/client/pkg/v3/types"
)

// FuzzParseInitialCluster holds ParseInitialCluster to what its comment
// promises: whatever it accepts, etcd's own parser (types.NewURLsMap, which
// etcd and etcdutl's Restore read --initial-cluster with) accepts too and
// reads as the same members with the same URLs, so a value checked here is
// never read differently by the member it is for.
func FuzzParseInitialCluster(f *testing.F) {
	for _, s := range []string{
		"m0=https://m0.svc:2380",
		"alpha-etcd-0=https://alpha-etcd-0.alpha-etcd.tenants.svc.cluster.local:2380,alpha-etcd-1=https://alpha-etcd-1.alpha-etcd.tenants.svc.cluster.local:2380",
		"m0=https://m0:2380,m0=http://10.0.0.1:2380",
		"m0=https://[fd00::1]:2380",
		"m0=HTTPS://m0:2380",
		"m0=https://m0:2380/",
		"m%300=https://m0:2380",
		"m0=https://m0:2380&m1=https://m1:2380",
		"m0=https://m0:2380,m1=https://m0:2380",
		"",
		",",
		"=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		members, err := ParseInitialCluster(s)
		if err != nil {
			return
		}
		theirs, err := types.NewURLsMap(s)
		if err != nil {
			t.Fatalf("ParseInitialCluster(%q) accepted %v; etcd refuses it: %v", s, members, err)
		}
		ours := map[string][]string{}
		for _, m := range members {
			if len(m.PeerURLs) == 0 {
				t.Fatalf("ParseInitialCluster(%q): member %s without URLs", s, m.Name)
			}
			urls := slices.Clone(m.PeerURLs)
			slices.Sort(urls)
			ours[m.Name] = urls
		}
		theirsMap := map[string][]string{}
		for name, urls := range theirs {
			ss := urls.StringSlice()
			slices.Sort(ss)
			theirsMap[name] = ss
		}
		if !reflect.DeepEqual(ours, theirsMap) {
			t.Fatalf("ParseInitialCluster(%q) = %v; etcd reads %v", s, ours, theirsMap)
		}
		// And it reads back from its own spelling.
		var parts []string
		for _, m := range members {
			for _, u := range m.PeerURLs {
				parts = append(parts, m.Name+"="+u)
			}
		}
		again, err := ParseInitialCluster(strings.Join(parts, ","))
		if err != nil || !reflect.DeepEqual(again, members) {
			t.Fatalf("ParseInitialCluster(%q) = %v, but its own spelling reads %v, %v", s, members, again, err)
		}
	})
}

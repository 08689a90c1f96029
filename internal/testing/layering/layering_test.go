package layering

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

const module = "github.com/kubefarm/kubefarm/"

// layers is docs/architecture.md's picture. A package is placed by its
// longest matching entry (an entry ending in "/" covers its subtree); a
// product package that matches none fails the test, so a new package has
// to be placed here and in the document.
var layers = map[string]int{
	// 7: binaries, scenarios, benchmarks and test support; free among
	// themselves, since nothing imports them.
	"cmd/": 7, "e2e/": 7, "hack/": 7, "internal/testing/": 7, "images/node/cmd/": 7, "charts": 7,
	// 6: wiring, one library per binary.
	"internal/manager": 6, "pxe/server": 6,
	// 5: reconcilers, webhooks, kubefarm-pxe's services, the agent's I/O.
	"controllers/tenantcluster": 5, "controllers/nodepool": 5, "controllers/rollout": 5,
	"controllers/machinenode": 5, "controllers/csrapproval": 5, "controllers/machinepower": 5,
	"controllers/machineremoval": 5, "webhooks/": 5,
	"pxe/dhcp": 5, "pxe/tftp": 5, "pxe/httpboot": 5, "pxe/imagecheck": 5, "pxe/inventory": 5,
	"pxe/dynamic": 5, "pxe/events": 5, "pxe/jointoken": 5, "pxe/routeradv": 5, "pxe/httplimit": 5,
	"agent": 5, "agent/pxeclient": 5, "agent/noderegister": 5, "agent/podguard": 5,
	// 4: the manager's way into the tenants, shared by its controllers.
	"internal/tenantcache": 4, "internal/notify": 4, "internal/alertgate": 4,
	// 3: pure builders and deciders, and the etcd libraries (a membership
	// step, a snapshot and its upload) the controller and kubefarm-etcd use.
	"internal/etcdmembers": 3, "internal/etcdsnapshot": 3,
	"controllers/tenantcluster/desired": 3, "controllers/nodepool/desired": 3,
	"controllers/rollout/plan": 3, "controllers/rollout/drain": 3, "internal/window": 3, "internal/upgradeplan": 3,
	"pxe/bootfile": 3, "pxe/leases": 3, "internal/fetchguard": 3,
	"agent/render": 3, "agent/cnicheck": 3, "agent/facts": 3, "images/node": 3, "images/node/fetch": 3,
	"power": 3, "power/qmp": 3, "power/redfish": 3, "power/ipmi": 3, "power/drivers": 3,
	// 2: contracts several parts read: the boot protocol both ends speak,
	// the node's CNI layout, a machine's image state, a tenant credential,
	// the pools of a BootImage, a backup's key file.
	"pxe/bootproto": 2, "pxe/bootpaths": 2, "pxe/bootsecret": 2, "pxe/nodeconfig": 2,
	"images/node/cni": 2, "internal/machinestate": 2, "internal/tenantcache/credential": 2,
	"internal/poolindex": 2, "internal/backupkeys": 2,
	// 1: shared leaves.
	"internal/conditions": 1, "internal/ssa": 1, "internal/bootstraptoken": 1, "internal/newc": 1,
	"internal/machineconfig": 1, "internal/restconfig": 1, "internal/s3target": 1, "internal/kubeversion": 1,
	// 0: the API types.
	"api/v1alpha1": 0,
}

// top is the layer nothing imports: its packages may import one another.
const top = 7

// place is the layer of a package and the entry that placed it.
func place(pkg string) (int, string, bool) {
	best := ""
	for entry := range layers {
		covers := pkg == entry || (strings.HasSuffix(entry, "/") && strings.HasPrefix(pkg, entry)) ||
			strings.HasPrefix(pkg, entry+"/")
		if covers && len(entry) > len(best) {
			best = entry
		}
	}
	if best == "" {
		return 0, "", false
	}
	return layers[best], best, true
}

// subtree is what two packages of one layer must share to import each
// other: kubefarm-pxe's services may use one another (pxe/), but two
// controllers, two webhooks or two internal/ packages may not.
func subtree(pkg string) string {
	parts := strings.Split(pkg, "/")
	if (parts[0] == "controllers" || parts[0] == "webhooks" || parts[0] == "internal") && len(parts) > 1 {
		return parts[0] + "/" + parts[1]
	}
	return parts[0]
}

// allowed says whether from (a product package) may import to.
func allowed(from, to string) bool {
	lf, _, _ := place(from)
	lt, _, _ := place(to)
	if lt < lf || lf == top {
		return true
	}
	return lt == lf && subtree(from) == subtree(to)
}

func TestAllowed(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		want     bool
	}{
		{"controllers/rollout", "controllers/rollout/plan", true},
		{"controllers/rollout", "controllers/nodepool", false},
		{"webhooks/nodepool", "controllers/rollout/plan", true},
		{"webhooks/nodepool", "webhooks/machine", false},
		{"pxe/httpboot", "pxe/inventory", true},
		{"internal/tenantcache", "controllers/tenantcluster", false},
		{"agent/cnicheck", "images/node", false},
		{"hack/bench/dhcp", "internal/testing/testenv", true},
		{"internal/etcdsnapshot", "internal/s3target", true},
		{"internal/machineconfig", "internal/restconfig", false},
		{"agent/cnicheck", "images/node/cni", true},
		{"internal/manager", "controllers/tenantcluster", true},
		{"api/v1alpha1", "internal/conditions", false},
		{"pxe/nodeconfig", "agent/render", false},
	} {
		if got := allowed(tc.from, tc.to); got != tc.want {
			t.Errorf("%s -> %s: allowed %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
}

type listed struct {
	ImportPath string
	Imports    []string
}

// TestImportsRunDownward reads every package's import lines (go list, the
// build's own view, tests excluded) and fails on an import into a higher
// layer or across to another subtree of the same layer.
func TestImportsRunDownward(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		from := strings.TrimPrefix(p.ImportPath, module)
		if _, _, ok := place(from); !ok {
			t.Errorf("package %s has no layer: add it to layers here and to docs/architecture.md", from)
			continue
		}
		seen++
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			to := strings.TrimPrefix(imp, module)
			if !allowed(from, to) {
				lf, ef, _ := place(from)
				lt, et, _ := place(to)
				t.Errorf("%s (layer %d, %s) imports %s (layer %d, %s)", from, lf, ef, to, lt, et)
			}
		}
	}
	if seen < 50 {
		t.Fatalf("only %d packages listed; go list did not see the module", seen)
	}
}

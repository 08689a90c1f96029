package etcdsnapshot_test

import (
	"strings"
	"testing"

	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/etcdsnapshot"
)

// TestMembersFlagsRestore: the restore tool takes the values the etcd
// members run with (controllers/tenantcluster/desired's EtcdFlags, with
// $(POD_NAME) as the kubelet expands it, and the initial cluster of the
// etcd state ConfigMap, which the members read from their environment),
// for every member, and its default data directory is theirs.
func TestMembersFlagsRestore(t *testing.T) {
	for _, replicas := range []int32{1, 3} {
		c := &desired.Cluster{Name: "alpha", Namespace: "tenants", EtcdReplicas: replicas, EtcdMembers: replicas, AdminClusterDomain: "cluster.local"}
		raw, err := desired.EtcdFlags(c)
		if err != nil {
			t.Fatal(err)
		}
		cm, err := desired.EtcdStateConfigMap(c, desired.EtcdClusterNew)
		if err != nil {
			t.Fatal(err)
		}
		flags := map[string]string{}
		for _, f := range raw {
			k, v, _ := strings.Cut(strings.TrimPrefix(f, "--"), "=")
			flags[k] = v
		}
		if flags["data-dir"] != etcdsnapshot.DefaultDataDir {
			t.Errorf("members run with --data-dir=%s; the restore tool's default is %s", flags["data-dir"], etcdsnapshot.DefaultDataDir)
		}
		if flags["name"] != "$("+etcdsnapshot.PodNameEnv+")" {
			t.Errorf("members run with --name=%s; the restore tool's default is $%s", flags["name"], etcdsnapshot.PodNameEnv)
		}
		for i := range replicas {
			pod := "alpha-etcd-" + string(rune('0'+i))
			expand := func(s string) string { return strings.ReplaceAll(s, "$(POD_NAME)", pod) }
			o := etcdsnapshot.RestoreOptions{
				Snapshot:          "/backup/tenants-alpha-20260101T000000Z.db",
				DataDir:           flags["data-dir"],
				Name:              expand(flags["name"]),
				InitialCluster:    cm.Data[desired.EtcdInitialClusterKey],
				AdvertisePeerURLs: etcdsnapshot.SplitList(expand(flags["initial-advertise-peer-urls"])),
				Token:             flags["initial-cluster-token"],
			}
			if err := o.Validate(); err != nil {
				t.Errorf("%d members, %s: the members' own flags are refused: %v", replicas, pod, err)
			}
		}
	}
}

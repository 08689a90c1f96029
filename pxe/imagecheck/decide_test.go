package imagecheck

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/fetchguard"
	"github.com/kubefarm/kubefarm/pxe/httpboot"
)

func digest(c byte) string { return "sha256:" + strings.Repeat(string(c), 64) }

func TestDecide(t *testing.T) {
	kernel := Result{Name: "kernel", Field: "spec.kernel.url", Digest: digest('a'), Size: 12 << 20}
	initrd := Result{Name: "initrd", Field: "spec.initrd.url", Digest: digest('b'), Size: 3<<20 + 1<<19}
	rootfs := Result{Name: "rootfs", Field: "spec.rootfs.url", Digest: digest('c'), Size: 700}
	// An error that carries more than the store's does (the received
	// content's digest): Decide must not show it.
	mismatch := fmt.Errorf("downloading %s: %w: content has digest %s", digest('c'), httpboot.ErrDigestMismatch, digest('f'))
	unreachable := errors.New("artifact " + digest('b') + ": dial tcp 10.0.0.1:80: connection refused")
	guard := fetchguard.New(fetchguard.Options{APIServer: []netip.Addr{netip.MustParseAddr("10.96.0.1")}})
	loopback := fmt.Errorf("artifact %s: %w", digest('a'), guard.Check(netip.MustParseAddr("127.0.0.1")))
	apiServer := fmt.Errorf("blob x: %w", guard.Check(netip.MustParseAddr("10.96.0.1")))
	fromRepo := func(r Result) Result { r.Field = "spec.repository"; return r }
	with := func(r Result, err error) Result { r.Err, r.Size = err, 0; return r }

	for _, tc := range []struct {
		name    string
		results []Result
		status  metav1.ConditionStatus
		reason  string
		msgHas  []string
		msgNot  []string
	}{
		{
			name: "all cached", results: []Result{kernel, initrd, rootfs},
			status: metav1.ConditionTrue, reason: kubefarmv1.ReasonArtifactsCached,
			msgHas: []string{"kernel sha256:aaaaaaaaaaaa (12.0 MiB)", "initrd sha256:bbbbbbbbbbbb (3.5 MiB)", "rootfs sha256:cccccccccccc (700 B)"},
		},
		{
			name: "rootfs digest mismatch", results: []Result{kernel, initrd, with(rootfs, mismatch)},
			status: metav1.ConditionFalse, reason: kubefarmv1.ReasonDigestMismatch,
			msgHas: []string{"rootfs (spec.rootfs.url): the content does not match the digest " + digest('c')},
			msgNot: []string{"kernel", "initrd", digest('f'), "content has digest"},
		},
		{
			name: "loopback URL refused", results: []Result{with(kernel, loopback), initrd, rootfs},
			status: metav1.ConditionFalse, reason: kubefarmv1.ReasonArtifactAddressRefused,
			msgHas: []string{"source address refused: kernel " + digest('a') + " (spec.kernel.url): refused to connect: 127.0.0.1 is a loopback address (127.0.0.0/8)"},
			msgNot: []string{"initrd", "rootfs"},
		},
		{
			name: "API server behind the repository refused", results: []Result{fromRepo(kernel), fromRepo(initrd), with(fromRepo(rootfs), apiServer)},
			status: metav1.ConditionFalse, reason: kubefarmv1.ReasonArtifactAddressRefused,
			msgHas: []string{"rootfs " + digest('c') + " (spec.repository): refused to connect: 10.96.0.1 is the admin cluster's API server"},
		},
		{
			name: "a refusal decides over a mismatch and a failure, all named", results: []Result{with(kernel, mismatch), with(initrd, unreachable), with(rootfs, loopback)},
			status: metav1.ConditionFalse, reason: kubefarmv1.ReasonArtifactAddressRefused,
			msgHas: []string{"rootfs " + digest('c') + " (spec.rootfs.url): refused", "kernel (spec.kernel.url): the content does not match", "initrd " + digest('b') + " (spec.initrd.url): artifact"},
		},
		{
			name: "fetch failure", results: []Result{kernel, with(initrd, unreachable), rootfs},
			status: metav1.ConditionFalse, reason: kubefarmv1.ReasonArtifactFetchFailed,
			msgHas: []string{"cannot fetch: initrd " + digest('b') + " (spec.initrd.url): ", "connection refused"},
			msgNot: []string{"kernel", "rootfs"},
		},
		{
			name: "mismatch decides over a fetch failure, both named", results: []Result{kernel, with(initrd, unreachable), with(rootfs, mismatch)},
			status: metav1.ConditionFalse, reason: kubefarmv1.ReasonDigestMismatch,
			msgHas: []string{"rootfs (spec.rootfs.url): the content does not match the digest " + digest('c'), "initrd " + digest('b')},
		},
		{
			name: "a registry mismatch wrapped once more is still a mismatch", results: []Result{with(kernel, fmt.Errorf("kernel: %w", mismatch)), initrd, rootfs},
			status: metav1.ConditionFalse, reason: kubefarmv1.ReasonDigestMismatch, msgHas: []string{"kernel (spec.kernel.url): the content does not match the digest " + digest('a')},
		},
		{
			name: "not cached after Ensure", results: []Result{kernel, initrd, with(rootfs, httpboot.ErrNotCached)},
			status: metav1.ConditionFalse, reason: kubefarmv1.ReasonArtifactFetchFailed, msgHas: []string{"rootfs", "not in cache"},
		},
		{
			name: "a long error is cut", results: []Result{kernel, initrd, with(rootfs, errors.New(strings.Repeat("x", 10000)))},
			status: metav1.ConditionFalse, reason: kubefarmv1.ReasonArtifactFetchFailed, msgHas: []string{strings.Repeat("x", maxErrorLen) + "..."},
			msgNot: []string{strings.Repeat("x", maxErrorLen+1)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, r := Decide(tc.results)
			if v.Type != kubefarmv1.ConditionArtifactsVerified || v.Status != tc.status || v.Reason != tc.reason {
				t.Errorf("ArtifactsVerified = %s %s %s, want %s %s", v.Type, v.Status, v.Reason, tc.status, tc.reason)
			}
			for _, s := range tc.msgHas {
				if !strings.Contains(v.Message, s) {
					t.Errorf("message %q lacks %q", v.Message, s)
				}
			}
			for _, s := range tc.msgNot {
				if strings.Contains(v.Message, s) {
					t.Errorf("message %q names %q", v.Message, s)
				}
			}
			if r.Type != kubefarmv1.ConditionReady || r.Status != v.Status || r.Reason != v.Reason || r.Message != v.Message {
				t.Errorf("Ready = %+v does not mirror %+v", r, v)
			}
		})
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 5 << 30: "5.0 GiB", 1 << 50: "1.0 PiB", 1 << 62: "4096.0 PiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

package httpboot

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
	"github.com/kubefarm/kubefarm/pxe/bootsecret"
	"github.com/kubefarm/kubefarm/pxe/events"
	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

const testBootID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"

func TestBootReportValidateNetwork(t *testing.T) {
	base := bootproto.BootReport{MAC: "02:00:00:00:00:01", BootID: testBootID, ImageDigest: dR}
	for _, tc := range []struct {
		name    string
		network *bootproto.NetworkVerdict
		ok      bool
	}{
		{"no verdict", nil, true},
		{"verified", &bootproto.NetworkVerdict{Verified: true, Reason: "conflist 10-kubefarm.conflist, 6 plugins"}, true},
		{"verified without reason", &bootproto.NetworkVerdict{Verified: true}, true},
		{"failed with reason", &bootproto.NetworkVerdict{Reason: "00-mesh.conflist sorts before 10-kubefarm.conflist"}, true},
		{"reason at the limit", &bootproto.NetworkVerdict{Reason: strings.Repeat("x", bootproto.MaxNetworkReason)}, true},
		{"failed without reason", &bootproto.NetworkVerdict{}, false},
		{"oversized reason", &bootproto.NetworkVerdict{Reason: strings.Repeat("x", bootproto.MaxNetworkReason+1)}, false},
		{"newline in reason", &bootproto.NetworkVerdict{Reason: "a\nb"}, false},
		{"invalid UTF-8", &bootproto.NetworkVerdict{Reason: "a\xffb"}, false},
	} {
		r := base
		r.Network = tc.network
		_, err := r.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestNetworkCondition(t *testing.T) {
	for _, tc := range []struct {
		v       *bootproto.NetworkVerdict
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{nil, metav1.ConditionUnknown, kubefarmv1.ReasonNetworkNotReported, "boot " + testBootID + ": the report carried no network verdict"},
		{&bootproto.NetworkVerdict{Verified: true, Reason: "ok"}, metav1.ConditionTrue, kubefarmv1.ReasonCNIChainVerified, "boot " + testBootID + ": ok"},
		{&bootproto.NetworkVerdict{Verified: true}, metav1.ConditionTrue, kubefarmv1.ReasonCNIChainVerified, "boot " + testBootID},
		{&bootproto.NetworkVerdict{Reason: "missing"}, metav1.ConditionFalse, kubefarmv1.ReasonCNIChainInvalid, "boot " + testBootID + ": missing"},
	} {
		c := NetworkCondition(testBootID, tc.v)
		if c.Type != kubefarmv1.ConditionNetworkVerified || c.Status != tc.status || c.Reason != tc.reason || c.Message != tc.message {
			t.Errorf("%+v: got %+v", tc.v, c)
		}
	}
}

// TestReportNetworkVerdict: the verdict lands as the NetworkVerified
// condition in the same write as lastBoot; False also gets a Warning
// event; a changed verdict for the same boot is written again, a repeat is
// not.
func TestReportNetworkVerdict(t *testing.T) {
	f := newHandlerFixture(t, testr.New(t))
	const mac, ip = "02:00:00:00:00:01", "10.0.0.11"
	m := f.machines.machines[mac]
	m.Spec.IP = ip
	rec := &fakeRecorder{}
	f.h.cfg.Recorder = rec
	ev := record.NewFakeRecorder(16)
	f.h.cfg.Events = events.New(ev, events.Config{})
	secret := mustSecret(t)
	m.Status.BootCredential = &kubefarmv1.BootCredential{SHA256: secret.Hash()}
	post := func(network *bootproto.NetworkVerdict) int {
		b, _ := json.Marshal(bootproto.BootReport{MAC: mac, BootID: testBootID, ImageDigest: sha(f.rootfs), Network: network})
		r := httptest.NewRequest("POST", "http://10.0.0.2:8080/report", strings.NewReader(string(b)))
		r.RemoteAddr = ip + ":40000"
		bootsecret.SetHeader(r, secret)
		w := httptest.NewRecorder()
		f.h.ServeHTTP(w, r)
		return w.Code
	}
	drain := func() (out []string) {
		for len(ev.Events) > 0 {
			out = append(out, <-ev.Events)
		}
		return out
	}

	bad := &bootproto.NetworkVerdict{Reason: "00-mesh.conflist in /etc/cni/net.d sorts before 10-kubefarm.conflist"}
	if code := post(bad); code != 204 {
		t.Fatalf("report: %d", code)
	}
	c := meta.FindStatusCondition(m.Status.Conditions, kubefarmv1.ConditionNetworkVerified)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != kubefarmv1.ReasonCNIChainInvalid || !strings.Contains(c.Message, "00-mesh.conflist") {
		t.Errorf("condition %+v, want False naming 00-mesh.conflist", c)
	}
	var warned bool
	for _, e := range drain() {
		if strings.HasPrefix(e, "Warning NetworkUnverified boot "+testBootID+": 00-mesh.conflist") {
			warned = true
		}
	}
	if !warned {
		t.Error("no NetworkUnverified warning")
	}

	if code := post(&bootproto.NetworkVerdict{Verified: true, Reason: "fixed"}); code != 204 {
		t.Fatalf("second report: %d", code)
	}
	if code := post(&bootproto.NetworkVerdict{Verified: true, Reason: "fixed"}); code != 204 {
		t.Fatalf("repeated report: %d", code)
	}
	if len(rec.conds) != 2 || rec.conds[1].Status != metav1.ConditionTrue {
		t.Errorf("recorded %+v, want False then True (the repeat not written)", rec.conds)
	}
	for _, e := range drain() {
		if strings.HasPrefix(e, "Warning") {
			t.Errorf("warning for a verified network: %s", e)
		}
	}
	// An oversized reason is refused before anything is written.
	if code := post(&bootproto.NetworkVerdict{Reason: strings.Repeat("x", bootproto.MaxNetworkReason+1)}); code != 400 {
		t.Errorf("oversized reason: %d, want 400", code)
	}
	if len(rec.conds) != 2 {
		t.Errorf("an invalid report was recorded")
	}
}

type fakeTenants struct {
	facts nodeconfig.TenantFacts
	err   error
}

func (f *fakeTenants) Facts(context.Context, *kubefarmv1.Machine) (nodeconfig.TenantFacts, error) {
	return f.facts, f.err
}

// TestConfigTenantFacts: /config carries the tenant's facts; when they
// cannot be had the answer is 503 and the boot window stays open.
func TestConfigTenantFacts(t *testing.T) {
	f := newHandlerFixture(t, testr.New(t))
	const mac, ip = "02:00:00:00:00:01", "10.0.0.11"
	f.machines.machines[mac].Spec.IP = ip
	f.h.cfg.Windows = NewBootWindows(10*time.Minute, nil)
	f.h.cfg.Recorder = &fakeRecorder{}
	f.h.cfg.Tokens = &fakeTokens{}
	tenants := &fakeTenants{err: errors.New("tenant API down")}
	f.h.cfg.Tenants = tenants
	secret := f.bootSecret(t, mac, ip+":40000")
	get := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://10.0.0.2:8080/config/"+mac, nil)
		r.RemoteAddr = ip + ":40000"
		bootsecret.SetHeader(r, secret)
		w := httptest.NewRecorder()
		f.h.ServeHTTP(w, r)
		return w
	}
	if w := get(); w.Code != 503 {
		t.Fatalf("tenant down: %d, want 503", w.Code)
	}
	tenants.err = nil
	tenants.facts = nodeconfig.TenantFacts{APIServer: "https://10.0.0.5:6443", CACert: []byte("-----BEGIN CERTIFICATE-----\n"),
		ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local", PodCIDR: "10.244.0.0/16"}
	w := get()
	if w.Code != 200 {
		t.Fatalf("config: %d (the window was consumed by the failed request?)", w.Code)
	}
	var nc nodeconfig.NodeConfig
	if err := json.Unmarshal(w.Body.Bytes(), &nc); err != nil {
		t.Fatal(err)
	}
	if nc.APIServer != "https://10.0.0.5:6443" || string(nc.CACert) != "-----BEGIN CERTIFICATE-----\n" ||
		nc.ClusterDomain != "cluster.local" || nc.PodCIDR != "10.244.0.0/16" || len(nc.ClusterDNS) != 1 {
		t.Errorf("config %+v lacks the tenant facts", nc.TenantFacts)
	}
	// The facts are flat in the JSON, beside the other fields.
	if !strings.Contains(w.Body.String(), `"apiServer":"https://10.0.0.5:6443"`) {
		t.Errorf("body %s", w.Body.String())
	}
}

// TestStatusRecorderCondition: one status patch writes lastBoot and the
// condition, and keeps the conditions other controllers wrote.
func TestStatusRecorderCondition(t *testing.T) {
	s := runtime.NewScheme()
	if err := kubefarmv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	m := machine("img1", nil)
	m.Status.Conditions = []metav1.Condition{{Type: kubefarmv1.ConditionReady, Status: metav1.ConditionFalse, Reason: "NotYet", LastTransitionTime: metav1.Now()}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(m).WithStatusSubresource(m).Build()
	ctx := context.Background()
	cur := &kubefarmv1.Machine{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(m), cur); err != nil {
		t.Fatal(err)
	}
	rec := kubefarmv1.BootRecord{BootID: testBootID, ImageDigest: dR, Time: metav1.Now()}
	if err := (StatusRecorder{Client: c}).RecordBoot(ctx, cur, rec, NetworkCondition(testBootID, &bootproto.NetworkVerdict{Verified: true})); err != nil {
		t.Fatal(err)
	}
	got := &kubefarmv1.Machine{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(m), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.LastBoot == nil || got.Status.LastBoot.BootID != testBootID {
		t.Errorf("lastBoot %+v", got.Status.LastBoot)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, kubefarmv1.ConditionNetworkVerified) ||
		meta.FindStatusCondition(got.Status.Conditions, kubefarmv1.ConditionReady) == nil {
		t.Errorf("conditions %+v, want NetworkVerified True beside Ready", got.Status.Conditions)
	}
	// A patch computed from a stale copy conflicts instead of dropping
	// what was written meanwhile.
	if err := (StatusRecorder{Client: c}).RecordBoot(ctx, cur, rec, NetworkCondition(testBootID, nil)); err == nil {
		t.Error("patch from a stale object succeeded")
	}
}

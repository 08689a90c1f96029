package httpboot_test

// The status writes of /report and /heartbeat against a real API server
// (internal/testing/testenv): the CRD's conditions list is a map keyed by type, so
// the heartbeat's apply of RebootRequired alone leaves every other field
// as it was, and the report's merge patch and the apply get along.

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/ssa"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
	"github.com/kubefarm/kubefarm/pxe/bootsecret"
	"github.com/kubefarm/kubefarm/pxe/httpboot"
)

// apiMachines reads straight from the API server, so that each step sees
// the previous one's write (kubefarm-pxe reads a cache, which lags by the
// watch's latency).
type apiMachines struct{ c client.Client }

func (a apiMachines) find(match func(*kubefarmv1.Machine) bool) (*kubefarmv1.Machine, bool) {
	var l kubefarmv1.MachineList
	if err := a.c.List(context.Background(), &l); err != nil {
		return nil, false
	}
	for i := range l.Items {
		if match(&l.Items[i]) {
			return &l.Items[i], true
		}
	}
	return nil, false
}

func (a apiMachines) ByMAC(mac string) (*kubefarmv1.Machine, bool) {
	return a.find(func(m *kubefarmv1.Machine) bool { return slices.Contains(m.Spec.MACs, mac) })
}

func (a apiMachines) ByIP(ip string) (*kubefarmv1.Machine, bool) {
	return a.find(func(m *kubefarmv1.Machine) bool { return m.Spec.IP == ip })
}

func (a apiMachines) BootImage(string) (*kubefarmv1.BootImage, bool) { return nil, false }

func (a apiMachines) Pool(string, string) (*kubefarmv1.NodePool, bool) { return nil, false }

func TestHeartbeatStatusAPI(t *testing.T) {
	const (
		mac, ip      = "02:00:00:00:00:01", "10.0.0.11"
		bootA, bootB = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "11111111-2222-3333-4444-555555555555"
	)
	digest := "sha256:" + strings.Repeat("a", 64)
	env := testenv.StartT(t, testenv.Options{})
	c := env.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "heartbeat-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	m := &kubefarmv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "m1"},
		Spec:       kubefarmv1.MachineSpec{Pool: "workers", Cluster: "c1", Hostname: "node-1", MACs: []string{mac}, IP: ip, DesiredImage: "img1"},
	}
	if err := c.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(m)
	// Another writer's condition, applied as machinenode does.
	nodeReady := &kubefarmv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "m1"}}
	nodeReady.Status.Conditions = []metav1.Condition{{Type: kubefarmv1.ConditionNodeReady, Status: metav1.ConditionTrue,
		Reason: kubefarmv1.ReasonNodeReady, Message: "kubelet is posting ready status", LastTransitionTime: metav1.Now()}}
	if err := ssa.ApplyStatus(ctx, c, "kubefarm-machinenode", nodeReady); err != nil {
		t.Fatal(err)
	}

	store, err := httpboot.NewStore(httpboot.StoreConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	// A replica: its own memory of boots, Machines read from the API.
	replica := func() *httpboot.Handler {
		h, err := httpboot.NewHandler(httpboot.Config{BaseURL: "http://10.0.0.2:8080", Recorder: httpboot.StatusRecorder{Client: c},
			Windows: httpboot.NewBootWindows(time.Minute, nil)}, apiMachines{c}, store, nil, nil, testr.New(t))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := replica()
	var secret bootsecret.Secret
	do := func(h *httpboot.Handler, method, path string, body []byte) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "http://10.0.0.2:8080"+path, strings.NewReader(string(body)))
		r.RemoteAddr = ip + ":40000"
		if secret != "" {
			bootsecret.SetHeader(r, secret)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	post := func(path string, v any) *httptest.ResponseRecorder {
		b, _ := json.Marshal(v)
		return do(h, "POST", path, b)
	}
	// newBoot: the replica answers the machine's iPXE DHCP request and
	// hands it its secret, whose hash lands in the Machine's status.
	newBoot := func() {
		t.Helper()
		h.Windows().Arm(mac)
		w := do(h, "GET", "/secret/"+mac, nil)
		if w.Code != 200 {
			t.Fatalf("secret: %d %s", w.Code, w.Body.String())
		}
		var err error
		if secret, err = bootsecret.FromArchive(w.Body.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	report := func(boot string) {
		t.Helper()
		if w := post("/report", bootproto.BootReport{MAC: mac, BootID: boot, ImageDigest: digest,
			Network: &bootproto.NetworkVerdict{Verified: true, Reason: "ok"}}); w.Code != 204 {
			t.Fatalf("report of %s: %d %s", boot, w.Code, w.Body.String())
		}
	}
	beat := func(boot string, sig *bootproto.RebootSignal) bool {
		t.Helper()
		w := post("/heartbeat", bootproto.Heartbeat{MAC: mac, BootID: boot, RebootRequired: sig})
		var reply bootproto.HeartbeatReply
		if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &reply) != nil {
			t.Fatalf("heartbeat of %s: %d %s", boot, w.Code, w.Body.String())
		}
		return reply.Reboot
	}
	get := func() *kubefarmv1.Machine {
		t.Helper()
		got := &kubefarmv1.Machine{}
		if err := c.Get(ctx, key, got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	cond := func(got *kubefarmv1.Machine, typ string) *metav1.Condition {
		return meta.FindStatusCondition(got.Status.Conditions, typ)
	}
	// others checks what the heartbeat must never touch.
	others := func(step string, got *kubefarmv1.Machine, boot string) {
		t.Helper()
		if c := cond(got, kubefarmv1.ConditionNodeReady); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("%s: NodeReady %+v, want machinenode's True kept", step, c)
		}
		if c := cond(got, kubefarmv1.ConditionNetworkVerified); c == nil || c.Message != "boot "+boot+": ok" {
			t.Errorf("%s: NetworkVerified %+v, want the report's of %s", step, c, boot)
		}
		if got.Status.LastBoot == nil || got.Status.LastBoot.BootID != boot {
			t.Errorf("%s: lastBoot %+v, want %s", step, got.Status.LastBoot, boot)
		}
	}

	newBoot()
	if bc := get().Status.BootCredential; bc == nil || !secret.Matches(bc.SHA256) {
		t.Fatalf("status.bootCredential %+v, want the secret's hash", bc)
	}
	report(bootA)
	if got := get(); cond(got, kubefarmv1.ConditionRebootRequired) != nil {
		t.Errorf("first report wrote RebootRequired %+v", cond(got, kubefarmv1.ConditionRebootRequired))
	}

	// The signal: one apply of the condition alone, under FieldOwner.
	sig := &bootproto.RebootSignal{Reason: "RebootRequiredFile", Message: "/run/reboot-required"}
	if beat(bootA, sig) {
		t.Fatal("asked to reboot without a rollout")
	}
	got := get()
	rr := cond(got, kubefarmv1.ConditionRebootRequired)
	if rr == nil || rr.Status != metav1.ConditionTrue || rr.Reason != "RebootRequiredFile" || rr.Message != "boot "+bootA+": /run/reboot-required" {
		t.Fatalf("RebootRequired %+v", rr)
	}
	others("raised", got, bootA)
	if !slices.ContainsFunc(got.ManagedFields, func(f metav1.ManagedFieldsEntry) bool {
		return f.Manager == httpboot.FieldOwner && f.Operation == metav1.ManagedFieldsOperationApply && f.Subresource == "status"
	}) {
		t.Errorf("no status apply by %s in %+v", httpboot.FieldOwner, got.ManagedFields)
	}
	// Again: no write at all.
	rv := got.ResourceVersion
	beat(bootA, sig)
	beat(bootA, &bootproto.RebootSignal{Reason: "InteractiveLogin"})
	beat(bootA, nil)
	if got := get(); got.ResourceVersion != rv {
		t.Errorf("repeated heartbeats wrote: resourceVersion %s, was %s", got.ResourceVersion, rv)
	}

	// The rollout controller's Rebooting phase for boot A.
	rolled := got.DeepCopy()
	rolled.Status.Rollout = &kubefarmv1.MachineRollout{Phase: kubefarmv1.RolloutRebooting, Reason: kubefarmv1.RolloutForReboot,
		TargetImage: kubefarmv1.ImageRef{Name: "img1", Digest: digest}, PhaseStartTime: metav1.Now(), PreviousBootID: bootA}
	if err := c.Status().Patch(ctx, rolled, client.MergeFrom(got), client.FieldOwner("kubefarm-rollout")); err != nil {
		t.Fatal(err)
	}
	if !beat(bootA, sig) {
		t.Error("boot A not asked to reboot while Rebooting it")
	}
	if beat(bootB, nil) {
		t.Error("boot B asked to reboot")
	}

	// The new boot's report makes it False, in its own write. It has its
	// own secret; the last boot's is refused, by this replica and by one
	// that never saw either boot (or restarted), which has only the status.
	last := secret
	newBoot()
	report(bootB)
	fresh := replica()
	hb, _ := json.Marshal(bootproto.Heartbeat{MAC: mac, BootID: bootB})
	if w := do(fresh, "POST", "/heartbeat", hb); w.Code != 200 {
		t.Errorf("the new boot's heartbeat to another replica: %d, want 200", w.Code)
	}
	current := secret
	secret = last
	for name, r := range map[string]*httpboot.Handler{"this replica": h, "another replica": fresh} {
		if w := do(r, "POST", "/heartbeat", hb); w.Code != 403 {
			t.Errorf("the last boot's secret to %s: %d, want 403", name, w.Code)
		}
	}
	secret = current
	got = get()
	rr = cond(got, kubefarmv1.ConditionRebootRequired)
	if rr == nil || rr.Status != metav1.ConditionFalse || rr.Reason != "NewBoot" || rr.Message != "boot "+bootB {
		t.Fatalf("RebootRequired after the new boot %+v", rr)
	}
	others("new boot", got, bootB)
	if got.Status.Rollout == nil || got.Status.Rollout.PreviousBootID != bootA {
		t.Errorf("rollout %+v, want the controller's", got.Status.Rollout)
	}

	// The new boot raises it again; the apply still touches nothing else.
	beat(bootB, &bootproto.RebootSignal{Reason: "InteractiveLogin", Message: "root on ttyS0"})
	got = get()
	rr = cond(got, kubefarmv1.ConditionRebootRequired)
	if rr == nil || rr.Status != metav1.ConditionTrue || rr.Reason != "InteractiveLogin" || rr.Message != "boot "+bootB+": root on ttyS0" {
		t.Fatalf("RebootRequired of boot B %+v", rr)
	}
	others("raised again", got, bootB)
	if got.Status.Rollout == nil || got.Status.Rollout.Phase != kubefarmv1.RolloutRebooting {
		t.Errorf("rollout %+v, want the controller's", got.Status.Rollout)
	}

	// An apply computed from a copy older than the latest write conflicts.
	stale := got.DeepCopy()
	stale.ResourceVersion = rv
	err = httpboot.StatusRecorder{Client: c}.RequireReboot(ctx, stale, metav1.Condition{Type: kubefarmv1.ConditionRebootRequired,
		Status: metav1.ConditionTrue, Reason: "InteractiveLogin", Message: "boot " + bootA, LastTransitionTime: metav1.Now()})
	if !apierrors.IsConflict(err) {
		t.Errorf("apply from a stale copy: %v, want a conflict", err)
	}
	if rr := cond(get(), kubefarmv1.ConditionRebootRequired); rr == nil || rr.Message != "boot "+bootB+": root on ttyS0" {
		t.Errorf("RebootRequired %+v after the stale apply", rr)
	}
}

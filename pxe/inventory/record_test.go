package inventory

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unsafe"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/httpboot"
)

// TestRebuiltMachineWritesTheSamePatch: a Machine with everything
// kubefarm-manager writes (spec.power, a rollout, ten history entries, the
// conditions of both controllers) keeps through its record every field
// kubefarm-pxe reads, and the boot report's status patch computed from the
// rebuilt Machine is byte for byte the one computed from the whole object:
// a dropped field is neither written nor deleted.
func TestRebuiltMachineWritesTheSamePatch(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	start := at
	digest := "sha256:" + strings.Repeat("ab", 32)
	full := &kubefarmv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "t1", Name: "workers-m1", UID: "u1", ResourceVersion: "42"},
		Spec: kubefarmv1.MachineSpec{Pool: "workers", Cluster: "c1", Hostname: "m1", MACs: []string{"02:00:00:00:00:01"}, IP: "10.0.0.1",
			Tags: []string{"gpu"}, DesiredImage: "img-2", Power: &kubefarmv1.PowerSpec{Driver: kubefarmv1.PowerQMP, Address: "tcp://10.0.0.100:4444"}},
		Status: kubefarmv1.MachineStatus{
			Conditions: []metav1.Condition{
				{Type: "NodeReady", Status: metav1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastTransitionTime: at},
				{Type: kubefarmv1.ConditionRebootRequired, Status: metav1.ConditionTrue, Reason: "KernelUpdated", Message: "boot b1: new kernel", LastTransitionTime: at},
			},
			ServedImage: &kubefarmv1.ImageRef{Name: "img-2", Digest: digest},
			LastBoot:    &kubefarmv1.BootRecord{BootID: "b1", ImageDigest: digest, Time: at},
			Rollout: &kubefarmv1.MachineRollout{Phase: kubefarmv1.RolloutRebooting, Reason: "ImageChanged", TargetImage: kubefarmv1.ImageRef{Name: "img-2", Digest: digest},
				PhaseStartTime: at, StartTime: &start, PreviousBootID: "b1", Message: "waiting for kubefarm-agent to reboot"},
		},
	}
	for i := 0; i < 10; i++ {
		full.Status.History = append(full.Status.History, kubefarmv1.RolloutHistoryEntry{Image: kubefarmv1.ImageRef{Name: "img-1", Digest: digest},
			Result: kubefarmv1.RolloutDone, FinishTime: at, Message: "updated in 4m"})
	}
	trimmed := newRecord(full.DeepCopy()).machine()
	if trimmed.Spec.Power != nil || trimmed.Status.History != nil {
		t.Errorf("kept what only kubefarm-manager reads: power %+v, %d history entries", trimmed.Spec.Power, len(trimmed.Status.History))
	}
	if want := (kubefarmv1.MachineRollout{Phase: kubefarmv1.RolloutRebooting, PreviousBootID: "b1"}); trimmed.Status.Rollout == nil || *trimmed.Status.Rollout != want {
		t.Errorf("rollout %+v, want %+v", trimmed.Status.Rollout, want)
	}
	// What kubefarm-pxe reads stays as it was.
	wantSpec := full.Spec
	wantSpec.Power = nil
	if !equality.Semantic.DeepEqual(trimmed.Spec, wantSpec) ||
		!equality.Semantic.DeepEqual(trimmed.Status.Conditions, full.Status.Conditions) ||
		!equality.Semantic.DeepEqual(trimmed.Status.LastBoot, full.Status.LastBoot) ||
		!equality.Semantic.DeepEqual(trimmed.Status.ServedImage, full.Status.ServedImage) ||
		trimmed.UID != full.UID || trimmed.ResourceVersion != full.ResourceVersion ||
		trimmed.Namespace != full.Namespace || trimmed.Name != full.Name {
		t.Errorf("trimmed what kubefarm-pxe reads:\n%+v\nfrom\n%+v", trimmed, full)
	}

	// The boot report's patch, as StatusRecorder sends it.
	patchOf := func(m *kubefarmv1.Machine) string {
		t.Helper()
		var data []byte
		c := interceptor.NewClient(fake.NewClientBuilder().Build(), interceptor.Funcs{
			SubResourcePatch: func(_ context.Context, _ client.Client, sub string, obj client.Object, p client.Patch, _ ...client.SubResourcePatchOption) error {
				if sub != "status" {
					t.Errorf("patched %s, not status", sub)
				}
				var err error
				data, err = p.Data(obj)
				return err
			}})
		rec := kubefarmv1.BootRecord{BootID: "b2", ImageDigest: digest, Time: metav1.NewTime(at.Add(time.Hour))}
		network := metav1.Condition{Type: kubefarmv1.ConditionNetworkVerified, Status: metav1.ConditionTrue, Reason: "Verified", Message: "boot b2", LastTransitionTime: at}
		reboot := metav1.Condition{Type: kubefarmv1.ConditionRebootRequired, Status: metav1.ConditionFalse, Reason: "NewBoot", Message: "boot b2"}
		if err := (httpboot.StatusRecorder{Client: c}).RecordBoot(context.Background(), m, rec, network, reboot); err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	if a, b := patchOf(full), patchOf(trimmed); a != b {
		t.Errorf("the boot report's patch differs when computed from the rebuilt Machine:\nwhole:   %s\ntrimmed: %s", a, b)
	}
}

// TestRecordsShareStrings: two Machines of one pool, decoded apart, hold
// one copy of their namespace, pool, cluster and image once recorded.
func TestRecordsShareStrings(t *testing.T) {
	decode := func(name string) *record {
		t.Helper()
		var m kubefarmv1.Machine
		raw := `{"kind":"Machine","apiVersion":"kubefarm.io/v1alpha1","metadata":{"namespace":"tenant-1","name":"` + name + `"},` +
			`"spec":{"pool":"workers","cluster":"c1","hostname":"` + name + `","macs":["02:00:00:00:00:01"],"ip":"10.0.0.1","desiredImage":"img-1"}}`
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			t.Fatal(err)
		}
		return newRecord(&m)
	}
	a, b := decode("m1"), decode("m2")
	for _, s := range [][2]string{{a.key.Namespace, b.key.Namespace}, {a.pool, b.pool}, {a.cluster, b.cluster},
		{a.desiredImage, b.desiredImage}} {
		if s[0] != s[1] || unsafe.StringData(s[0]) != unsafe.StringData(s[1]) {
			t.Errorf("%q: two copies", s[0])
		}
	}
	if a.key.Name == b.key.Name || a.hostname != "m1" {
		t.Errorf("names mixed up: %s %s", a.key.Name, b.hostname)
	}
}

// TestRecordRoundTrip: what a record gives back is the Machine's spec as
// the API holds it, whether or not its addresses are in canonical form, and
// no status where it had none.
func TestRecordRoundTrip(t *testing.T) {
	for _, spec := range []kubefarmv1.MachineSpec{
		{Pool: "p", Cluster: "c", Hostname: "h", MACs: []string{"02:00:00:00:00:01"}, IP: "10.0.0.1", DesiredImage: "i"},
		{Pool: "p", Cluster: "c", Hostname: "h", MACs: []string{"02:00:00:00:00:01", "02:00:00:00:00:02"}, IP: "10.0.0.1", Tags: []string{"a", "b"}},
		{Pool: "p", MACs: []string{"02:00:00:00:00:0A"}, IP: "10.0.0.1"},
		{Pool: "p", MACs: []string{"not-a-mac", "02:00:00:00:00:01"}, IP: "fd00::1"},
		{Pool: "p"},
	} {
		m := &kubefarmv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "n", UID: "u", ResourceVersion: "3"}, Spec: spec}
		got := newRecord(m.DeepCopy()).machine()
		want := m.DeepCopy()
		want.TypeMeta = metav1.TypeMeta{APIVersion: "kubefarm.io/v1alpha1", Kind: "Machine"}
		if !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("round trip of %+v:\n got %+v\nwant %+v", spec, got, want)
		}
	}
}

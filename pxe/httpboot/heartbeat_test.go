package httpboot

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
	"github.com/kubefarm/kubefarm/pxe/bootsecret"
	"github.com/kubefarm/kubefarm/pxe/events"
)

const (
	hbMAC, hbIP = "02:00:00:00:00:01", "10.0.0.11"
	bootA       = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	bootB       = "11111111-2222-3333-4444-555555555555"
)

// heartbeatFixture is the handler fixture with machine 02:00:00:00:00:01
// at hbIP, a fake status writer and events.
type heartbeatFixture struct {
	*handlerFixture
	m   *kubefarmv1.Machine
	rec *fakeRecorder
	ev  *record.FakeRecorder
	// secret is the machine's boot secret, whose hash is in its status;
	// post sends it.
	secret bootsecret.Secret
}

func newHeartbeatFixture(t testing.TB, log logr.Logger) *heartbeatFixture {
	f := &heartbeatFixture{handlerFixture: newHandlerFixture(t, log), rec: &fakeRecorder{}, ev: record.NewFakeRecorder(64)}
	f.m = f.machines.machines[hbMAC]
	f.m.Spec.IP = hbIP
	f.h.cfg.Recorder = f.rec
	f.h.cfg.Events = events.New(f.ev, events.Config{})
	f.secret = mustSecret(t)
	f.m.Status.BootCredential = &kubefarmv1.BootCredential{SHA256: f.secret.Hash()}
	return f
}

// post sends body to path from the address from and returns the answer.
func (f *heartbeatFixture) post(path, from, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "http://10.0.0.2:8080"+path, strings.NewReader(body))
	r.RemoteAddr = from
	if f.secret != "" {
		bootsecret.SetHeader(r, f.secret)
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

// beat posts a heartbeat of boot from the machine's address and decodes a
// 200's answer.
func (f *heartbeatFixture) beat(t *testing.T, boot string, sig *bootproto.RebootSignal) (int, bootproto.HeartbeatReply) {
	t.Helper()
	b, _ := json.Marshal(bootproto.Heartbeat{MAC: hbMAC, BootID: boot, RebootRequired: sig})
	w := f.post("/heartbeat", hbIP+":40000", string(b))
	var reply bootproto.HeartbeatReply
	if w.Code == 200 {
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		dec := json.NewDecoder(w.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&reply); err != nil {
			t.Fatalf("reply %q: %v", w.Body.String(), err)
		}
	}
	return w.Code, reply
}

func (f *heartbeatFixture) report(t *testing.T, boot string) {
	t.Helper()
	b, _ := json.Marshal(bootproto.BootReport{MAC: hbMAC, BootID: boot, ImageDigest: sha(f.rootfs), Network: &bootproto.NetworkVerdict{Verified: true, Reason: "ok"}})
	if w := f.post("/report", hbIP+":40000", string(b)); w.Code != 204 {
		t.Fatalf("report of %s: %d %s", boot, w.Code, w.Body.String())
	}
}

func (f *heartbeatFixture) events() (out []string) {
	for len(f.ev.Events) > 0 {
		out = append(out, <-f.ev.Events)
	}
	return out
}

// TestHeartbeatRefused: heartbeats are checked as reports are: a bad or
// oversized body is 400, a MAC the cache does not know or another address
// than the machine's lease is the same 403; nothing is written.
func TestHeartbeatRefused(t *testing.T) {
	f := newHeartbeatFixture(t, testr.New(t))
	f.m.Status.LastBoot = &kubefarmv1.BootRecord{BootID: bootA, ImageDigest: sha(f.rootfs)}
	f.m.Status.Rollout = &kubefarmv1.MachineRollout{Phase: kubefarmv1.RolloutRebooting, PreviousBootID: bootA}
	mine := hbIP + ":40000"
	good := `{"mac":"` + hbMAC + `","bootID":"` + bootA + `","rebootRequired":{"reason":"RebootRequiredFile","message":"linux-image"}}`
	for _, tc := range []struct {
		name, method, from, body string
		code                     int
		event                    string // prefix of the one event; "" for none
	}{
		{"GET", "GET", mine, "", 405, ""},
		{"other IP", "POST", "10.0.0.12:1", good, 403, "Warning Refused refused POST /heartbeat from 10.0.0.12: not from the machine's leased IP 10.0.0.11"},
		{"unknown MAC", "POST", mine, strings.Replace(good, hbMAC, "02:00:00:00:00:99", 1), 403, ""},
		{"bad MAC", "POST", mine, strings.Replace(good, hbMAC, "02:00", 1), 400, ""},
		{"garbage", "POST", mine, "{", 400, ""},
		{"empty", "POST", mine, "", 400, ""},
		{"trailing data", "POST", mine, good + "{}", 400, ""},
		{"no boot ID", "POST", mine, `{"mac":"` + hbMAC + `"}`, 400, ""},
		{"upper-case boot ID", "POST", mine, strings.Replace(good, bootA, strings.ToUpper(bootA), 1), 400, ""},
		{"unknown reason", "POST", mine, strings.Replace(good, "RebootRequiredFile", "Cosmic rays", 1), 400, ""},
		{"no reason", "POST", mine, strings.Replace(good, `"reason":"RebootRequiredFile",`, "", 1), 400, ""},
		{"message too long", "POST", mine, strings.Replace(good, "linux-image", strings.Repeat("x", bootproto.MaxRebootMessage+1), 1), 400, ""},
		{"unprintable message", "POST", mine, strings.Replace(good, "linux-image", `a\nb`, 1), 400, ""},
		{"too large", "POST", mine, strings.Replace(good, `"mac"`, strings.Repeat(" ", maxHeartbeat)+`"mac"`, 1), 400, ""},
	} {
		var w *httptest.ResponseRecorder
		if tc.method == "GET" {
			w = f.do("GET", "/heartbeat", nil)
		} else {
			w = f.post("/heartbeat", tc.from, tc.body)
		}
		if w.Code != tc.code {
			t.Errorf("%s: %d %q, want %d", tc.name, w.Code, w.Body.String(), tc.code)
		}
		if tc.code == 403 && w.Body.String() != "forbidden\n" {
			t.Errorf("%s: body %q, want the one 403 body", tc.name, w.Body.String())
		}
		got := f.events()
		switch {
		case tc.event == "" && len(got) != 0:
			t.Errorf("%s: events %q, want none", tc.name, got)
		case tc.event != "" && (len(got) != 1 || !strings.HasPrefix(got[0], tc.event)):
			t.Errorf("%s: events %q, want one starting %q", tc.name, got, tc.event)
		}
	}
	if len(f.rec.reboots) != 0 || meta.FindStatusCondition(f.m.Status.Conditions, kubefarmv1.ConditionRebootRequired) != nil {
		t.Errorf("a refused heartbeat wrote %+v", f.rec.reboots)
	}
	// A field this server does not know is no reason to leave a node
	// unaware that it must reboot.
	if w := f.post("/heartbeat", mine, strings.Replace(good, `"mac"`, `"uptime":3600,"mac"`, 1)); w.Code != 200 || !strings.Contains(w.Body.String(), `"reboot":true`) {
		t.Errorf("heartbeat with an unknown field: %d %q", w.Code, w.Body.String())
	}
	if got := testutil.ToFloat64(f.metrics.requests.WithLabelValues(RouteHeartbeat, "403")); got != 2 {
		t.Errorf("heartbeat 403s = %v, want 2", got)
	}
}

// TestHeartbeatNeedsTheBootSecret: what a pod on the node can send (the
// node's address, MAC and boot ID, all readable from inside a pod) is not
// a heartbeat without the boot's secret: no secret, another one, or the
// secret of the machine's previous boot is the same 403, with a Warning on
// the machine, and nothing is written or answered.
func TestHeartbeatNeedsTheBootSecret(t *testing.T) {
	f := newHeartbeatFixture(t, testr.New(t))
	f.m.Status.LastBoot = &kubefarmv1.BootRecord{BootID: bootA, ImageDigest: sha(f.rootfs)}
	f.m.Status.Rollout = &kubefarmv1.MachineRollout{Phase: kubefarmv1.RolloutRebooting, PreviousBootID: bootA}
	good := `{"mac":"` + hbMAC + `","bootID":"` + bootA + `","rebootRequired":{"reason":"RebootRequiredFile","message":"linux-image"}}`
	current := f.secret
	previous := mustSecret(t)
	for name, s := range map[string]bootsecret.Secret{"no secret": "", "another secret": mustSecret(t), "the previous boot's secret": previous} {
		f.secret = s
		w := f.post("/heartbeat", hbIP+":40000", good)
		if w.Code != 403 || w.Body.String() != "forbidden\n" || strings.Contains(w.Body.String(), "reboot") {
			t.Errorf("%s: %d %q, want the one 403", name, w.Code, w.Body.String())
		}
		if got := f.events(); len(got) != 1 || !strings.Contains(got[0], "Warning Refused") || !strings.Contains(got[0], noSecret) {
			t.Errorf("%s: events %q, want one Refused naming the secret", name, got)
		}
		// Events for one reason are throttled per machine; forget them.
		f.h.cfg.Events = events.New(f.ev, events.Config{})
	}
	if len(f.rec.reboots) != 0 {
		t.Errorf("a heartbeat without the secret wrote %+v", f.rec.reboots)
	}
	f.secret = current
	if code, reply := f.beat(t, bootA, nil); code != 200 || !reply.Reboot {
		t.Errorf("heartbeat with the boot's secret: %d %+v", code, reply)
	}
	// A report is held to the same rule.
	f.secret = previous
	b, _ := json.Marshal(bootproto.BootReport{MAC: hbMAC, BootID: bootB, ImageDigest: sha(f.rootfs)})
	if w := f.post("/report", hbIP+":40000", string(b)); w.Code != 403 || len(f.rec.recs) != 0 {
		t.Errorf("report with the previous boot's secret: %d, %d records", w.Code, len(f.rec.recs))
	}
}

// TestHeartbeatReboot: the answer is reboot exactly while the rollout is
// Rebooting the boot the heartbeat names.
func TestHeartbeatReboot(t *testing.T) {
	f := newHeartbeatFixture(t, testr.New(t))
	f.m.Status.LastBoot = &kubefarmv1.BootRecord{BootID: bootA, ImageDigest: sha(f.rootfs)}
	for _, tc := range []struct {
		name    string
		rollout *kubefarmv1.MachineRollout
		boot    string
		reboot  bool
	}{
		{"no rollout", nil, bootA, false},
		{"draining", &kubefarmv1.MachineRollout{Phase: kubefarmv1.RolloutDraining, PreviousBootID: bootA}, bootA, false},
		{"rebooting this boot", &kubefarmv1.MachineRollout{Phase: kubefarmv1.RolloutRebooting, PreviousBootID: bootA}, bootA, true},
		{"rebooting, already rebooted", &kubefarmv1.MachineRollout{Phase: kubefarmv1.RolloutRebooting, PreviousBootID: bootA}, bootB, false},
		{"rebooting, no previous boot ID", &kubefarmv1.MachineRollout{Phase: kubefarmv1.RolloutRebooting}, bootA, false},
		{"verifying", &kubefarmv1.MachineRollout{Phase: kubefarmv1.RolloutVerifying, PreviousBootID: bootA}, bootB, false},
		{"verifying the old boot", &kubefarmv1.MachineRollout{Phase: kubefarmv1.RolloutVerifying, PreviousBootID: bootA}, bootA, false},
	} {
		f.m.Status.Rollout = tc.rollout
		code, reply := f.beat(t, tc.boot, nil)
		if code != 200 || reply.Reboot != tc.reboot {
			t.Errorf("%s: %d %+v, want reboot %v", tc.name, code, reply, tc.reboot)
		}
	}
	if len(f.rec.reboots) != 0 || len(f.rec.recs) != 0 {
		t.Errorf("heartbeats without a signal wrote %+v %+v", f.rec.reboots, f.rec.recs)
	}
	// An upper-case MAC is the same machine.
	w := f.post("/heartbeat", hbIP+":1", `{"mac":"02-00-00-00-00-01","bootID":"`+bootA+`"}`)
	if w.Code != 200 || w.Body.String() != `{"reboot":false}` || w.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("dashed MAC: %d %q %v", w.Code, w.Body.String(), w.Header())
	}
}

// TestHeartbeatRebootRequired: the signal is written once per boot, only
// for the boot of lastBoot, and a new boot's report clears it.
func TestHeartbeatRebootRequired(t *testing.T) {
	f := newHeartbeatFixture(t, testr.New(t))
	file := &bootproto.RebootSignal{Reason: reasonRebootRequiredFile, Message: "/run/reboot-required (linux-image-amd64)"}
	login := &bootproto.RebootSignal{Reason: reasonInteractiveLogin, Message: "user root logged in"}

	// Before any report there is no boot to raise it for.
	if code, _ := f.beat(t, bootA, file); code != 200 || len(f.rec.reboots) != 0 {
		t.Fatalf("heartbeat before the report: %d, wrote %+v", code, f.rec.reboots)
	}
	f.report(t, bootA)
	if len(f.rec.also) != 1 || len(f.rec.also[0]) != 0 {
		t.Errorf("first report wrote %+v besides NetworkVerified, want nothing (no RebootRequired yet)", f.rec.also)
	}
	// No signal, nothing written.
	if code, _ := f.beat(t, bootA, nil); code != 200 || len(f.rec.reboots) != 0 {
		t.Fatalf("heartbeat without a signal: %d, wrote %+v", code, f.rec.reboots)
	}
	// The signal: one write.
	if code, reply := f.beat(t, bootA, file); code != 200 || reply.Reboot {
		t.Fatalf("heartbeat with the signal: %d %+v", code, reply)
	}
	c := meta.FindStatusCondition(f.m.Status.Conditions, kubefarmv1.ConditionRebootRequired)
	if len(f.rec.reboots) != 1 || c == nil || c.Status != metav1.ConditionTrue || c.Reason != "RebootRequiredFile" ||
		c.Message != "boot "+bootA+": /run/reboot-required (linux-image-amd64)" || c.LastTransitionTime.IsZero() {
		t.Fatalf("wrote %+v; condition %+v", f.rec.reboots, c)
	}
	// Again, and with the other reason: True for this boot already.
	for _, sig := range []*bootproto.RebootSignal{file, file, login} {
		if code, _ := f.beat(t, bootA, sig); code != 200 {
			t.Fatalf("repeat: %d", code)
		}
	}
	if len(f.rec.reboots) != 1 {
		t.Errorf("repeats wrote %+v", f.rec.reboots[1:])
	}
	// An agent of another boot than lastBoot's cannot raise it.
	meta.RemoveStatusCondition(&f.m.Status.Conditions, kubefarmv1.ConditionRebootRequired)
	if code, _ := f.beat(t, bootB, login); code != 200 || len(f.rec.reboots) != 1 {
		t.Errorf("heartbeat of another boot: %d, wrote %+v", code, f.rec.reboots)
	}
	if code, _ := f.beat(t, bootA, login); code != 200 || len(f.rec.reboots) != 2 {
		t.Fatalf("heartbeat after the condition went: %d, wrote %+v", code, f.rec.reboots)
	}

	// A new boot's report clears it in the write that records the boot.
	f.report(t, bootB)
	c = meta.FindStatusCondition(f.m.Status.Conditions, kubefarmv1.ConditionRebootRequired)
	if len(f.rec.also) != 2 || len(f.rec.also[1]) != 1 || c == nil || c.Status != metav1.ConditionFalse || c.Reason != "NewBoot" || c.Message != "boot "+bootB {
		t.Fatalf("report of a new boot wrote %+v; condition %+v", f.rec.also, c)
	}
	// The report's repeat (same boot) leaves it alone.
	f.m.Status.Conditions[0].Message += " changed" // NetworkVerified: make the repeat write
	f.report(t, bootB)
	if len(f.rec.also) != 3 || len(f.rec.also[2]) != 0 {
		t.Errorf("repeated report wrote %+v", f.rec.also[2:])
	}
	// A stale agent of the old boot cannot raise it for the new one.
	if code, _ := f.beat(t, bootA, file); code != 200 || len(f.rec.reboots) != 2 {
		t.Errorf("heartbeat of the old boot: %d, wrote %+v", code, f.rec.reboots)
	}
	// The new boot raises it again: False is not True for this boot.
	if code, _ := f.beat(t, bootB, &bootproto.RebootSignal{Reason: reasonInteractiveLogin}); code != 200 || len(f.rec.reboots) != 3 {
		t.Fatalf("heartbeat of the new boot: %d, wrote %+v", code, f.rec.reboots)
	}
	c = meta.FindStatusCondition(f.m.Status.Conditions, kubefarmv1.ConditionRebootRequired)
	if c.Status != metav1.ConditionTrue || c.Reason != "InteractiveLogin" || c.Message != "boot "+bootB {
		t.Errorf("condition %+v", c)
	}
}

// TestHeartbeatWriteFails: a failed write is 503 (the agent sends the
// signal again next time), unless the answer is to reboot.
func TestHeartbeatWriteFails(t *testing.T) {
	f := newHeartbeatFixture(t, testr.New(t))
	f.m.Status.LastBoot = &kubefarmv1.BootRecord{BootID: bootA, ImageDigest: sha(f.rootfs)}
	f.rec.rebootErr = errors.New("API down")
	sig := &bootproto.RebootSignal{Reason: reasonRebootRequiredFile}
	if code, _ := f.beat(t, bootA, sig); code != 503 {
		t.Errorf("failed write: %d, want 503", code)
	}
	f.m.Status.Rollout = &kubefarmv1.MachineRollout{Phase: kubefarmv1.RolloutRebooting, PreviousBootID: bootA}
	if code, reply := f.beat(t, bootA, sig); code != 200 || !reply.Reboot {
		t.Errorf("failed write while rebooting: %d %+v, want reboot", code, reply)
	}
	f.h.cfg.Recorder = nil
	f.m.Status.Rollout = nil
	if code, _ := f.beat(t, bootA, sig); code != 503 {
		t.Errorf("no recorder: %d, want 503", code)
	}
	if code, reply := f.beat(t, bootA, nil); code != 200 || reply.Reboot {
		t.Errorf("no recorder, no signal: %d %+v", code, reply)
	}
}

func TestOfBoot(t *testing.T) {
	for _, tc := range []struct {
		msg string
		ok  bool
	}{
		{"boot " + bootA, true},
		{"boot " + bootA + ": x", true},
		{"boot " + bootA + "x", false},
		{"boot " + bootB, false},
		{"", false},
	} {
		if got := kubefarmv1.OfBoot(&metav1.Condition{Message: tc.msg}, bootA); got != tc.ok {
			t.Errorf("%q: %v", tc.msg, got)
		}
	}
}

// FuzzHeartbeat: whatever the body, parseHeartbeat accepts only a
// heartbeat within the bounds (normalised MAC, kernel boot ID, known
// reason, short printable message), and the handler answers one of its
// codes, with a reply that decodes when it is 200.
func FuzzHeartbeat(f *testing.F) {
	fx := newHeartbeatFixture(f, logr.Discard())
	fx.m.Status.LastBoot = &kubefarmv1.BootRecord{BootID: bootA, ImageDigest: dR}
	fx.m.Status.Rollout = &kubefarmv1.MachineRollout{Phase: kubefarmv1.RolloutRebooting, PreviousBootID: bootA}
	for _, s := range []string{
		`{"mac":"` + hbMAC + `","bootID":"` + bootA + `"}`,
		`{"mac":"02-00-00-00-00-01","bootID":"` + bootB + `","rebootRequired":{"reason":"InteractiveLogin","message":"root on tty1"}}`,
		`{"mac":"` + hbMAC + `","bootID":"` + bootA + `","rebootRequired":{"reason":"RebootRequiredFile"}}`,
		`{"mac":"` + hbMAC + `","bootID":"` + bootA + `","rebootRequired":null,"x":[1,{}]}`,
		`{"mac":"` + hbMAC + `","bootID":"` + bootA + `","rebootRequired":{"reason":"InteractiveLogin","message":"\u00e9\u0000"}}`,
		`{"mac":"` + hbMAC + `","MAC":"02:00:00:00:00:02","bootID":"` + bootA + `"}`,
		`{}`, `null`, `[]`, `"x"`, ``, `{"mac":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		hb, err := parseHeartbeat(body)
		if err == nil {
			if mac, err := bootproto.NormalizeMAC(hb.MAC); err != nil || mac != hb.MAC {
				t.Fatalf("accepted MAC %q", hb.MAC)
			}
			if !bootproto.ValidBootID(hb.BootID) {
				t.Fatalf("accepted boot ID %q", hb.BootID)
			}
			if s := hb.RebootRequired; s != nil {
				if s.Reason != reasonInteractiveLogin && s.Reason != reasonRebootRequiredFile {
					t.Fatalf("accepted reason %q", s.Reason)
				}
				if len(s.Message) > bootproto.MaxRebootMessage || !bootproto.Printable(s.Message) {
					t.Fatalf("accepted message %q", s.Message)
				}
			}
			// What the agent would send of it parses the same.
			again, _ := json.Marshal(hb)
			if hb2, err := parseHeartbeat(again); err != nil || hb2.MAC != hb.MAC || hb2.BootID != hb.BootID || (hb2.RebootRequired == nil) != (hb.RebootRequired == nil) {
				t.Fatalf("%s does not parse back: %+v, %v", again, hb2, err)
			}
		}
		r := httptest.NewRequest("POST", "http://10.0.0.2:8080/heartbeat", strings.NewReader(string(body)))
		r.RemoteAddr = hbIP + ":40000"
		w := httptest.NewRecorder()
		fx.h.ServeHTTP(w, r)
		switch w.Code {
		case 200:
			var reply bootproto.HeartbeatReply
			if err := json.Unmarshal(w.Body.Bytes(), &reply); err != nil {
				t.Fatalf("reply %q: %v", w.Body.String(), err)
			}
			if err != nil {
				t.Fatalf("200 to a body parseHeartbeat refuses: %q", body)
			}
		case 400:
			if len(body) <= maxHeartbeat && err == nil {
				t.Fatalf("400 to a heartbeat parseHeartbeat accepts: %q", body)
			}
		case 403:
		default:
			t.Fatalf("%q: code %d", body, w.Code)
		}
		if strings.Contains(w.Body.String(), "\n") && w.Code == 200 {
			t.Fatalf("reply %q", w.Body.String())
		}
	})
}

// The reasons a node sends are the API's condition reasons, by value:
// bootproto imports no API package.
func TestRebootReasonsAreTheAPIs(t *testing.T) {
	if bootproto.ReasonInteractiveLogin != kubefarmv1.ReasonInteractiveLogin || bootproto.ReasonRebootRequiredFile != kubefarmv1.ReasonRebootRequiredFile {
		t.Errorf("bootproto's reasons %q, %q differ from the API's %q, %q", bootproto.ReasonInteractiveLogin, bootproto.ReasonRebootRequiredFile,
			kubefarmv1.ReasonInteractiveLogin, kubefarmv1.ReasonRebootRequiredFile)
	}
}

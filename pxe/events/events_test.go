package events

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// drain returns the events the fake recorder has buffered so far.
func drain(f *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-f.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestThrottle(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	f := record.NewFakeRecorder(100)
	r := New(f, Config{Interval: time.Minute, Now: c.now})

	steps := []struct {
		name    string
		advance time.Duration
		machine string
		reason  string
		subject string
		want    bool
	}{
		{"first offer", 0, "ns/m1", ReasonOffered, "", true},
		{"repeat within the interval", 10 * time.Second, "ns/m1", ReasonOffered, "", false},
		{"another reason is its own stream", 0, "ns/m1", ReasonAcked, "", true},
		{"another machine is its own stream", 0, "ns/m2", ReasonOffered, "", true},
		{"another subject is its own stream", 0, "ns/m1", ReasonImageServed, "sha256:aa", true},
		{"second artifact of the same boot", 0, "ns/m1", ReasonImageServed, "sha256:bb", true},
		{"just before the interval ends", 49*time.Second + 999*time.Millisecond, "ns/m1", ReasonOffered, "", false},
		{"the interval has passed", time.Millisecond, "ns/m1", ReasonOffered, "", true},
		{"no machine", 0, "", ReasonOffered, "", false},
		{"malformed machine key", 0, "nons", ReasonOffered, "", false},
	}
	for _, s := range steps {
		c.add(s.advance)
		if got := r.Due(s.machine, s.reason, s.subject); got != s.want {
			t.Errorf("%s: Due = %v, want %v", s.name, got, s.want)
		}
		r.Normal(s.machine, s.reason, s.subject, "msg "+s.name)
		got := drain(f)
		if s.want && len(got) != 1 {
			t.Errorf("%s: recorded %d events, want 1: %q", s.name, len(got), got)
		}
		if !s.want && len(got) != 0 {
			t.Errorf("%s: recorded %q, want nothing", s.name, got)
		}
		if s.want && len(got) == 1 && got[0] != "Normal "+s.reason+" msg "+s.name {
			t.Errorf("%s: recorded %q", s.name, got[0])
		}
	}
}

func TestConcurrentCallersRecordOnce(t *testing.T) {
	f := record.NewFakeRecorder(1000)
	r := New(f, Config{})
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Warning("ns/m", ReasonRefused, "", "refused")
		}()
	}
	wg.Wait()
	if got := drain(f); len(got) != 1 || !strings.HasPrefix(got[0], "Warning Refused") {
		t.Fatalf("50 concurrent identical events recorded as %q, want exactly one", got)
	}
}

func TestNilRecorderIsSilent(t *testing.T) {
	var r *Recorder
	if r.Due("ns/m", ReasonOffered, "") {
		t.Fatal("nil recorder says an event is due")
	}
	r.Normal("ns/m", ReasonOffered, "", "x") // must not panic
}

func TestMemoryIsBounded(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	r := New(record.NewFakeRecorder(maxTracked*2+10), Config{Now: c.now})
	for i := 0; i < maxTracked+10; i++ {
		r.Normal("ns/m", ReasonOffered, string(rune('a'+i%26))+strings.Repeat("x", i%7)+itoa(i), "m")
	}
	if n := len(r.last); n > maxTracked {
		t.Fatalf("throttle tracks %d entries, more than %d", n, maxTracked)
	}
	// After the interval every old entry is sweepable: the next insert
	// past the bound keeps only fresh ones.
	c.add(2 * DefaultInterval)
	for i := 0; i < maxTracked; i++ {
		r.Normal("ns/n", ReasonAcked, itoa(i), "m")
	}
	if n := len(r.last); n > maxTracked {
		t.Fatalf("throttle tracks %d entries after a sweep, more than %d", n, maxTracked)
	}
}

func TestUIDAttached(t *testing.T) {
	f := &capture{}
	var asked []string
	r := New(f, Config{UID: func(ns, name string) (types.UID, bool) {
		asked = append(asked, ns+"/"+name)
		return "uid-1", true
	}})
	if r.Due("ns/m", ReasonAcked, "") {
		if len(asked) != 0 {
			t.Fatal("Due looked up the UID; it must stay allocation-free")
		}
	}
	r.Normal("ns/m", ReasonAcked, "", "acked")
	want := corev1.ObjectReference{APIVersion: "kubefarm.io/v1alpha1", Kind: "Machine", Namespace: "ns", Name: "m", UID: "uid-1"}
	if len(f.refs) != 1 || *f.refs[0] != want {
		t.Fatalf("events attached to %v, want one on %v", f.refs, want)
	}
	if len(asked) != 1 || asked[0] != "ns/m" {
		t.Fatalf("UID lookups %q, want one for ns/m", asked)
	}
}

// capture keeps the objects events are recorded on.
type capture struct{ refs []*corev1.ObjectReference }

func (c *capture) Event(o runtime.Object, _, _, _ string) {
	c.refs = append(c.refs, o.(*corev1.ObjectReference))
}
func (c *capture) Eventf(o runtime.Object, t, r, m string, _ ...any) { c.Event(o, t, r, m) }
func (c *capture) AnnotatedEventf(o runtime.Object, _ map[string]string, t, r, m string, _ ...any) {
	c.Event(o, t, r, m)
}

func BenchmarkDueThrottled(b *testing.B) {
	r := New(record.NewFakeRecorder(10), Config{})
	r.Normal("ns/m", ReasonOffered, "", "first")
	b.ReportAllocs()
	for b.Loop() {
		if r.Due("ns/m", ReasonOffered, "") {
			b.Fatal("due")
		}
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// TestBucket: past the burst, Events of new machines (a storm makes every
// machine new) are refused at the configured rate, counted by reason in
// the metric, and logged at most every DropReportInterval with the counts;
// Due refuses them before any message is built; the bucket refills.
func TestBucket(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	f := record.NewFakeRecorder(1000)
	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	r := New(f, Config{Interval: time.Minute, Now: c.now, Rate: 2, Burst: 3, Log: logger})
	reg := prometheus.NewRegistry()
	if err := r.Register(reg); err != nil {
		t.Fatal(err)
	}
	dropped := func(reason string) int { return int(testutil.ToFloat64(r.dropped.WithLabelValues(reason))) }

	// A storm: 10 machines offered at one instant, then acked.
	for i := range 10 {
		r.Normal(fmt.Sprintf("ns/m%d", i), ReasonOffered, "", "offered")
	}
	if got := len(drain(f)); got != 3 {
		t.Errorf("%d Events written at once, want the burst, 3", got)
	}
	if got := dropped(ReasonOffered); got != 7 {
		t.Errorf("dropped Offered %d, want 7", got)
	}
	if r.Due("ns/m20", ReasonAcked, "") {
		t.Error("Due with an empty bucket: the caller would format a message for nothing")
	}
	if got := dropped(ReasonAcked); got != 1 {
		t.Errorf("a refusal in Due was not counted: dropped Acked %d, want 1", got)
	}
	if r.Due("ns/m20", ReasonAcked, "") || dropped(ReasonAcked) != 1 {
		t.Error("the same refused Event was counted twice within its interval")
	}
	if len(lines) != 0 {
		t.Errorf("logged before DropReportInterval: %q", lines)
	}

	// One second refills two tokens.
	c.add(time.Second)
	for i := 30; i < 35; i++ {
		r.Normal(fmt.Sprintf("ns/m%d", i), ReasonAcked, "", "acked")
	}
	if got := len(drain(f)); got != 2 {
		t.Errorf("%d Events written a second later, want the rate, 2", got)
	}

	// Past DropReportInterval, the next refusal writes one line with the
	// counts by reason since the start.
	c.add(DropReportInterval)
	for i := 40; i < 50; i++ {
		r.Warning(fmt.Sprintf("ns/m%d", i), ReasonRefused, "", "refused")
	}
	if len(lines) != 1 {
		t.Fatalf("%d log lines, want one: %q", len(lines), lines)
	}
	for _, want := range []string{`"Offered"=7`, `"Acked"=4`, `"dropped"=`} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("log line %s lacks %s", lines[0], want)
		}
	}
	if got := len(drain(f)); got != 3 {
		t.Errorf("after 30 s the bucket holds its burst again: %d Events written, want 3", got)
	}
}

// TestStormEntriesAreSwept: a storm stamps an entry for each machine; one
// interval later the next event, or Sweep on a quiet replica, forgets them
// all, so the throttle's memory follows the last interval's machines
// instead of growing to maxTracked.
func TestStormEntriesAreSwept(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	r := New(record.NewFakeRecorder(100), Config{Now: c.now, Rate: 1, Burst: 1})
	const storm = 20_000
	for i := 0; i < storm; i++ {
		r.Due("ns/m"+itoa(i), ReasonOffered, "")
		r.Normal("ns/m"+itoa(i), ReasonAcked, "", "acked")
	}
	// Every machine's two reasons but the first Due, which found a token
	// and left the stamp to the record that would follow it.
	if n := len(r.last); n != 2*storm-1 {
		t.Fatalf("the storm left %d entries, want %d", n, 2*storm-1)
	}
	c.add(DefaultInterval / 2)
	r.Normal("ns/late", ReasonAcked, "", "acked")
	if n := len(r.last); n != 2*storm {
		t.Fatalf("swept before the interval: %d entries", n)
	}
	c.add(DefaultInterval / 2)
	r.Normal("ns/next", ReasonAcked, "", "acked")
	if n := len(r.last); n != 2 {
		t.Fatalf("one interval after the storm the throttle tracks %d entries, want 2 (ns/late, ns/next)", n)
	}
	c.add(DefaultInterval)
	r.Sweep()
	if n := len(r.last); n != 0 {
		t.Fatalf("Sweep on a quiet replica left %d entries", n)
	}
	// Swept entries no longer throttle: the machine is recorded again.
	if !r.Due("ns/m1", ReasonOffered, "") {
		t.Error("a swept machine's event is held back")
	}
}

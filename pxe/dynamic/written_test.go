package dynamic

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func lease(name, rv, mac, ip string) *kubefarmv1.DHCPLease {
	return &kubefarmv1.DHCPLease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv},
		Spec: kubefarmv1.DHCPLeaseSpec{Pool: "p", MAC: mac, IP: ip}}
}

// size is the number of versions w holds.
func (w *written) size() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}

func key(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }

// TestWrittenOverlay: which version of each object a lookup sees, from the
// cache's copies (by version) and this replica's own writes.
func TestWrittenOverlay(t *testing.T) {
	const ip = "10.0.0.5"
	byIP := func(l *kubefarmv1.DHCPLease) bool { return l.Spec.IP == ip }
	tests := []struct {
		name    string
		cached  []*kubefarmv1.DHCPLease // the cache's answer to the lookup
		inCache map[string]string       // object -> version the cache holds
		wrote   []*kubefarmv1.DHCPLease // this replica's writes, in order
		deleted map[string]string       // object -> version this replica deleted
		age     time.Duration           // since the writes
		want    []string                // name@version seen
	}{
		{name: "nothing written", cached: []*kubefarmv1.DHCPLease{lease("a", "10", "m1", ip)}, want: []string{"a@10"}},
		{name: "the cache has not seen the create",
			wrote: []*kubefarmv1.DHCPLease{lease("a", "12", "m1", ip)}, want: []string{"a@12"}},
		{name: "the cache holds an older version",
			cached: []*kubefarmv1.DHCPLease{lease("a", "10", "m1", ip)}, inCache: map[string]string{"a": "10"},
			wrote: []*kubefarmv1.DHCPLease{lease("a", "12", "m1", ip)}, want: []string{"a@12"}},
		{name: "the cache caught up",
			cached: []*kubefarmv1.DHCPLease{lease("a", "12", "m1", ip)}, inCache: map[string]string{"a": "12"},
			wrote: []*kubefarmv1.DHCPLease{lease("a", "12", "m1", ip)}, want: []string{"a@12"}},
		{name: "another writer came after ours",
			cached: []*kubefarmv1.DHCPLease{lease("a", "15", "m2", ip)}, inCache: map[string]string{"a": "15"},
			wrote: []*kubefarmv1.DHCPLease{lease("a", "12", "m1", ip)}, want: []string{"a@15"}},
		{name: "our write moved the lease off the address",
			cached: []*kubefarmv1.DHCPLease{lease("a", "10", "m1", ip)}, inCache: map[string]string{"a": "10"},
			wrote: []*kubefarmv1.DHCPLease{lease("a", "12", "m1", "10.0.0.6")}, want: nil},
		{name: "the cache's newer copy no longer matches",
			inCache: map[string]string{"a": "15"},
			wrote:   []*kubefarmv1.DHCPLease{lease("a", "12", "m1", ip)}, want: nil},
		{name: "the cache's older copy does not match yet",
			inCache: map[string]string{"a": "9"},
			wrote:   []*kubefarmv1.DHCPLease{lease("a", "12", "m1", ip)}, want: []string{"a@12"}},
		{name: "deleted, the cache still has it",
			cached: []*kubefarmv1.DHCPLease{lease("a", "12", "m1", ip)}, inCache: map[string]string{"a": "12"},
			deleted: map[string]string{"a": "12"}, want: nil},
		{name: "deleted, then created again by another replica",
			cached: []*kubefarmv1.DHCPLease{lease("a", "20", "m2", ip)}, inCache: map[string]string{"a": "20"},
			deleted: map[string]string{"a": "12"}, want: []string{"a@20"}},
		{name: "a write older than the TTL is the cache's business",
			cached: []*kubefarmv1.DHCPLease{lease("a", "10", "m1", ip)}, inCache: map[string]string{"a": "10"},
			wrote: []*kubefarmv1.DHCPLease{lease("a", "12", "m2", ip)}, age: writtenTTL + time.Second, want: []string{"a@10"}},
		{name: "a later write is not undone by an earlier one",
			wrote: []*kubefarmv1.DHCPLease{lease("a", "14", "m1", ip), lease("a", "12", "m1", ip)}, want: []string{"a@14"}},
		{name: "other objects are left alone",
			cached: []*kubefarmv1.DHCPLease{lease("b", "3", "m3", ip)}, inCache: map[string]string{"b": "3"},
			wrote: []*kubefarmv1.DHCPLease{lease("a", "12", "m1", ip)}, want: []string{"b@3", "a@12"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
			w := newWritten(func() time.Time { return now })
			for _, l := range tt.wrote {
				w.wrote(l)
			}
			for name, rv := range tt.deleted {
				w.deleted(key(name), rv)
			}
			now = now.Add(tt.age)
			got := w.overlay(tt.cached, byIP, func(k types.NamespacedName) (string, bool) {
				rv, ok := tt.inCache[k.Name]
				return rv, ok
			})
			var names []string
			for _, l := range got {
				names = append(names, l.Name+"@"+l.ResourceVersion)
			}
			if fmt.Sprint(names) != fmt.Sprint(tt.want) {
				t.Fatalf("saw %v, want %v", names, tt.want)
			}
		})
	}
}

// TestWrittenSeen: a version goes once the watch shows it or a later one;
// a deletion once the watch shows the object gone.
func TestWrittenSeen(t *testing.T) {
	w := newWritten(time.Now)
	w.wrote(lease("a", "12", "m1", "10.0.0.5"))
	w.deleted(key("b"), "7")
	steps := []struct {
		name string
		rv   string
		gone bool
		want int
	}{
		{"a", "11", false, 2}, // an older event of a
		{"b", "7", false, 2},  // b as it was before the deletion
		{"a", "12", false, 1}, // a caught up
		{"b", "6", true, 1},   // an earlier incarnation of b deleted
		{"b", "7", true, 0},   // b's deletion
		{"c", "99", false, 0}, // not ours
	}
	for _, s := range steps {
		w.seen(key(s.name), s.rv, s.gone)
		if got := w.size(); got != s.want {
			t.Fatalf("after the watch showed %s at %s (gone %v): %d versions held, want %d", s.name, s.rv, s.gone, got, s.want)
		}
	}
}

// TestWrittenBounded: at writtenMax versions, a new object's write is not
// remembered until expired ones make room.
func TestWrittenBounded(t *testing.T) {
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	w := newWritten(func() time.Time { return now })
	for i := range writtenMax {
		w.wrote(lease(fmt.Sprintf("l%d", i), "5", "m", "10.0.0.1"))
	}
	w.wrote(lease("extra", "5", "m", "10.0.0.1"))
	if got := w.size(); got != writtenMax {
		t.Fatalf("%d versions held, want the bound %d", got, writtenMax)
	}
	now = now.Add(writtenTTL/2 + time.Second)
	w.wrote(lease("l0", "6", "m", "10.0.0.1")) // a held object's new version still replaces it
	now = now.Add(writtenTTL/2 + time.Second)
	w.wrote(lease("extra", "5", "m", "10.0.0.1"))
	if got := w.size(); got != 2 {
		t.Fatalf("%d versions held after the TTL, want 2 (l0's second version, the last write)", got)
	}
}

package leases

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"testing"
)

func mac(i int) net.HardwareAddr {
	m := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(m[2:], uint32(i))
	return m
}

func leaseFor(machine string, ip byte, macs ...net.HardwareAddr) []Lease {
	out := make([]Lease, 0, len(macs))
	for _, m := range macs {
		out = append(out, Lease{MAC: m, IP: net.IP{10, 0, 0, ip}, Machine: machine})
	}
	return out
}

func TestTable(t *testing.T) {
	type step struct {
		op      string // upsert | delete
		machine string
		macs    []int
	}
	tests := []struct {
		name  string
		steps []step
		want  map[int]string // mac index -> owning machine; absent = no lease
		len   int
	}{
		{"insert two machines", []step{{"upsert", "ns/a", []int{1, 2}}, {"upsert", "ns/b", []int{3}}},
			map[int]string{1: "ns/a", 2: "ns/a", 3: "ns/b"}, 3},
		{"mac change removes old key", []step{{"upsert", "ns/a", []int{1, 2}}, {"upsert", "ns/a", []int{2, 4}}},
			map[int]string{2: "ns/a", 4: "ns/a"}, 2},
		{"delete", []step{{"upsert", "ns/a", []int{1, 2}}, {"upsert", "ns/b", []int{3}}, {"delete", "ns/a", nil}},
			map[int]string{3: "ns/b"}, 1},
		{"upsert empty deletes", []step{{"upsert", "ns/a", []int{1}}, {"upsert", "ns/a", nil}}, map[int]string{}, 0},
		{"delete unknown is a no-op", []step{{"upsert", "ns/a", []int{1}}, {"delete", "ns/z", nil}}, map[int]string{1: "ns/a"}, 1},
		{"mac moves to another machine", []step{{"upsert", "ns/a", []int{1, 2}}, {"upsert", "ns/b", []int{2}}},
			map[int]string{1: "ns/a", 2: "ns/b"}, 2},
		{"old owner deleted after move keeps new owner", []step{{"upsert", "ns/a", []int{1, 2}}, {"upsert", "ns/b", []int{2}}, {"delete", "ns/a", nil}},
			map[int]string{2: "ns/b"}, 1},
		{"old owner updated after move keeps new owner", []step{{"upsert", "ns/a", []int{1, 2}}, {"upsert", "ns/b", []int{2}}, {"upsert", "ns/a", []int{1}}},
			map[int]string{1: "ns/a", 2: "ns/b"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab := NewTable()
			for _, s := range tt.steps {
				switch s.op {
				case "upsert":
					var ms []net.HardwareAddr
					for _, i := range s.macs {
						ms = append(ms, mac(i))
					}
					tab.Upsert(s.machine, leaseFor(s.machine, 1, ms...))
				case "delete":
					tab.Delete(s.machine)
				}
			}
			for i := 0; i < 6; i++ {
				l, ok := tab.Lookup(mac(i))
				owner, want := tt.want[i]
				if ok != want || (ok && l.Machine != owner) {
					t.Errorf("mac %d: got %v %+v, want %v %q", i, ok, l, want, owner)
				}
			}
			if tab.Len() != tt.len {
				t.Errorf("Len = %d, want %d", tab.Len(), tt.len)
			}
			// byMachine must agree with byMAC, or deletes leak keys.
			for owner := range map[string]bool{"ns/a": true, "ns/b": true} {
				for _, m := range tab.MachineMACs(owner) {
					if l, ok := tab.Lookup(m); !ok || l.Machine != owner {
						t.Errorf("%s lists %s it does not own", owner, m)
					}
				}
			}
		})
	}
}

func TestLookupRejectsNonEthernet(t *testing.T) {
	tab := NewTable()
	tab.Upsert("ns/a", leaseFor("ns/a", 1, mac(1)))
	if _, ok := tab.Lookup(nil); ok {
		t.Fatal("nil MAC found")
	}
	if _, ok := tab.Lookup(append(mac(1), 0)); ok {
		t.Fatal("7-byte MAC found")
	}
}

func TestUpsertCopiesLeases(t *testing.T) {
	tab := NewTable()
	in := leaseFor("ns/a", 1, mac(1))
	tab.Upsert("ns/a", in)
	in[0].Hostname = "changed"
	if l, _ := tab.Lookup(mac(1)); l.Hostname != "" {
		t.Fatal("table shares the caller's slice")
	}
}

// TestConcurrent runs readers against a writer; run with -race to be useful,
// and it checks readers never see a lease for a MAC its machine does not have.
func TestConcurrent(t *testing.T) {
	tab := NewTable()
	const machines = 200
	for i := 0; i < machines; i++ {
		tab.Upsert(fmt.Sprintf("ns/m%d", i), leaseFor(fmt.Sprintf("ns/m%d", i), 1, mac(i)))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i := 0; i < machines; i++ {
					if l, ok := tab.Lookup(mac(i)); ok && l.Machine != fmt.Sprintf("ns/m%d", i) {
						t.Errorf("mac %d owned by %s", i, l.Machine)
						return
					}
				}
			}
		}()
	}
	for round := 0; round < 50; round++ {
		for i := 0; i < machines; i++ {
			key := fmt.Sprintf("ns/m%d", i)
			if round%2 == 0 {
				tab.Delete(key)
			} else {
				tab.Upsert(key, leaseFor(key, 1, mac(i)))
			}
		}
	}
	close(stop)
	wg.Wait()
}

func BenchmarkLookup20k(b *testing.B) {
	const n = 20000
	tab := NewTable()
	macs := make([]net.HardwareAddr, n)
	for i := 0; i < n; i++ {
		macs[i] = mac(i)
		key := fmt.Sprintf("ns/m%d", i)
		tab.Upsert(key, leaseFor(key, 1, macs[i]))
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, ok := tab.Lookup(macs[i%n]); !ok {
				b.Fatal("missing lease")
			}
			i += 7919 // a prime stride so goroutines do not walk in lockstep
		}
	})
}

func TestLookupIP(t *testing.T) {
	type step struct {
		op      string // upsert | delete
		machine string
		ip      byte
		macs    []int
	}
	tests := []struct {
		name  string
		steps []step
		want  map[byte]string // last IP byte -> owning machine; absent = no lease
	}{
		{"one IP per machine", []step{{"upsert", "ns/a", 1, []int{1, 2}}, {"upsert", "ns/b", 2, []int{3}}},
			map[byte]string{1: "ns/a", 2: "ns/b"}},
		{"IP change frees the old IP", []step{{"upsert", "ns/a", 1, []int{1}}, {"upsert", "ns/a", 5, []int{1}}},
			map[byte]string{5: "ns/a"}},
		{"delete frees the IP", []step{{"upsert", "ns/a", 1, []int{1}}, {"upsert", "ns/b", 2, []int{2}}, {"delete", "ns/a", 0, nil}},
			map[byte]string{2: "ns/b"}},
		{"upsert empty frees the IP", []step{{"upsert", "ns/a", 1, []int{1}}, {"upsert", "ns/a", 1, nil}}, map[byte]string{}},
		{"newest writer of a shared IP wins", []step{{"upsert", "ns/a", 1, []int{1}}, {"upsert", "ns/b", 1, []int{2}}},
			map[byte]string{1: "ns/b"}},
		{"deleting the older holder keeps the newer", []step{{"upsert", "ns/a", 1, []int{1}}, {"upsert", "ns/b", 1, []int{2}}, {"delete", "ns/a", 0, nil}},
			map[byte]string{1: "ns/b"}},
		{"last MAC moved away frees the IP", []step{{"upsert", "ns/a", 1, []int{1}}, {"upsert", "ns/b", 2, []int{1}}},
			map[byte]string{2: "ns/b"}},
		{"one of two MACs moved away keeps the IP", []step{{"upsert", "ns/a", 1, []int{1, 2}}, {"upsert", "ns/b", 2, []int{1}}},
			map[byte]string{1: "ns/a", 2: "ns/b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab := NewTable()
			for _, s := range tt.steps {
				switch s.op {
				case "upsert":
					var ms []net.HardwareAddr
					for _, i := range s.macs {
						ms = append(ms, mac(i))
					}
					tab.Upsert(s.machine, leaseFor(s.machine, s.ip, ms...))
				case "delete":
					tab.Delete(s.machine)
				}
			}
			for ip := byte(0); ip < 8; ip++ {
				l, ok := tab.LookupIP(net.IP{10, 0, 0, ip})
				owner, want := tt.want[ip]
				if ok != want || (ok && l.Machine != owner) {
					t.Errorf("10.0.0.%d: got %v %+v, want %v %q", ip, ok, l, want, owner)
					continue
				}
				if !ok {
					continue
				}
				// The lease found by IP is one the owner still holds by MAC.
				if byMAC, ok := tab.Lookup(l.MAC); !ok || byMAC != l {
					t.Errorf("10.0.0.%d: lease for MAC %s is not the one the MAC index holds", ip, l.MAC)
				}
			}
		})
	}
	tab := NewTable()
	tab.Upsert("ns/a", leaseFor("ns/a", 1, mac(1)))
	if _, ok := tab.LookupIP(net.ParseIP("10.0.0.1")); !ok {
		t.Error("16-byte form of an IPv4 address not found")
	}
	if _, ok := tab.LookupIP(net.ParseIP("fe80::1")); ok {
		t.Error("IPv6 address found")
	}
	if _, ok := tab.LookupIP(nil); ok {
		t.Error("nil IP found")
	}
}

func TestLookupsDoNotAllocate(t *testing.T) {
	tab := NewTable()
	tab.Upsert("ns/a", leaseFor("ns/a", 1, mac(1)))
	m, ip := mac(1), net.IP{10, 0, 0, 1}
	if n := testing.AllocsPerRun(100, func() {
		_, _ = tab.Lookup(m)
		_, _ = tab.LookupIP(ip)
	}); n != 0 {
		t.Fatalf("lookups allocate %v times", n)
	}
}

func BenchmarkLookupIP20k(b *testing.B) {
	const n = 20000
	tab := NewTable()
	ips := make([]net.IP, n)
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("ns/m%d", i)
		ips[i] = net.IP{10, 1, byte(i >> 8), byte(i)}
		tab.Upsert(key, []Lease{{MAC: mac(i), IP: ips[i]}})
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, ok := tab.LookupIP(ips[i%n]); !ok {
				b.Fatal("missing lease")
			}
			i += 7919
		}
	})
}

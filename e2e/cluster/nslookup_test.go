package cluster

import (
	"slices"
	"testing"
)

// TestNslookupAnswers reads busybox nslookup's answers, never its server's
// address, from the output of Debian's busybox 1.35 (what the e2e image
// carries) and of busybox before 1.28.
func TestNslookupAnswers(t *testing.T) {
	cases := []struct {
		name, out string
		want      []string
	}{
		{"busybox 1.35, one A record",
			"Server:\t\t10.96.0.10\nAddress:\t10.96.0.10:53\n\nName:\tweb.default.svc.cluster.local\nAddress: 10.96.0.1\n\n\n",
			[]string{"10.96.0.1"}},
		{"busybox 1.35, A and AAAA",
			"Server:\t\t10.96.0.10\nAddress:\t10.96.0.10:53\n\nName:\tx.example\nAddress: 192.0.2.1\n\nName:\tx.example\nAddress: 2001:db8::1\n",
			[]string{"192.0.2.1", "2001:db8::1"}},
		{"NXDOMAIN: only the server's address",
			"Server:\t\t10.96.0.10\nAddress:\t10.96.0.10:53\n\n** server can't find nope.default.svc.cluster.local: NXDOMAIN\n",
			nil},
		{"old busybox",
			"Server:    10.96.0.10\nAddress 1: 10.96.0.10 kube-dns.kube-system.svc.cluster.local\n\nName:      kubernetes.default.svc.cluster.local\nAddress 1: 10.96.0.1 kubernetes.default.svc.cluster.local\n",
			[]string{"10.96.0.1"}},
		{"nothing", "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := NslookupAnswers(tc.out); !slices.Equal(got, tc.want) {
				t.Errorf("NslookupAnswers = %q, want %q", got, tc.want)
			}
		})
	}
}

package dhcp

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the DHCP server, registered on a registry the caller owns so
// that several servers (and tests) never collide on the global one.
type Metrics struct {
	packets *prometheus.CounterVec
	latency prometheus.Histogram
}

// NewMetrics registers the server's metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		packets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kubefarm", Subsystem: "pxe_dhcp", Name: "packets_total",
			Help: "DHCPv4 packets received, by message type and what the server did with them.",
		}, []string{"type", "result"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "kubefarm", Subsystem: "pxe_dhcp", Name: "handle_seconds",
			Help: "Time from reading a packet to sending its reply, queueing included.",
			// 25µs .. ~100ms: a healthy reply takes tens of microseconds;
			// the top buckets show queueing under load.
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 13),
		}),
	}
	for _, c := range []prometheus.Collector{m.packets, m.latency} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) count(typ string, o Outcome) {
	if m != nil {
		m.packets.WithLabelValues(typ, string(o)).Inc()
	}
}

func (m *Metrics) observe(since time.Time) {
	if m != nil {
		m.latency.Observe(time.Since(since).Seconds())
	}
}

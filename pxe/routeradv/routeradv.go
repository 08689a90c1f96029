// Package routeradv ends iPXE's wait for IPv6 on a boot network that has no
// IPv6 router.
//
// iPXE's autoboot configures every network device with all its
// configurators at once, DHCPv4 and IPv6 router discovery, and fetches the
// boot file only when both have finished. Where nothing answers its router
// solicitations, router discovery ends by timing out, about 15 seconds
// into every boot (BIOS and UEFI alike). iPXE ends it at once when the
// first router advertisement arrives that asks for neither stateful nor
// stateless DHCPv6.
//
// The Responder answers each router solicitation on the boot interface with
// exactly that advertisement, and nothing else: a router lifetime of zero
// (RFC 4861 6.2.5: "not a default router"), no prefix, no managed or other
// configuration flag, no hop limit, reachable time or retransmit timer
// (zero means unspecified). A host that takes it learns nothing: no address,
// no route, no DNS. It is not for a boot network with IPv6 routers: iPXE
// takes only the first solicited advertisement, and this one may win the
// race against the real router's (kubefarm-pxe --answer-router-solicitations=false).
package routeradv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	"github.com/mdlayher/ndp"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/ipv6"
	"golang.org/x/time/rate"
)

// Advertisement is the answer to every solicitation: a router advertisement
// that announces no router, no prefix and no DHCPv6. It carries the
// interface's link-layer address (RFC 4861 4.2), which spares the client a
// neighbour solicitation before it could answer anything.
func Advertisement(mac net.HardwareAddr) *ndp.RouterAdvertisement {
	ra := &ndp.RouterAdvertisement{}
	if len(mac) == 6 {
		ra.Options = []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: mac}}
	}
	return ra
}

// Destination is where the answer to a solicitation from src goes: back to
// the soliciting address, or to all nodes when the solicitation came from
// the unspecified address (a host without an address yet; RFC 4861 6.2.6).
func Destination(src netip.Addr) netip.Addr {
	if src.IsUnspecified() || !src.Is6() {
		return netip.IPv6LinkLocalAllNodes()
	}
	return src
}

// Default answer rate: far above what a boot storm of thousands of machines
// sends (iPXE solicits a handful of times per boot), and low enough that a
// flood costs this server nothing worth noticing.
const (
	DefaultRate  = 200
	DefaultBurst = 400
)

// Metrics counts solicitations by what became of them.
type Metrics struct {
	solicitations *prometheus.CounterVec
}

// Outcomes of a solicitation.
const (
	Answered = "answered"
	Limited  = "rate_limited"
	Failed   = "send_failed"
	// Routed: a hop limit other than 255, so not from this link.
	Routed = "not_on_link"
)

// NewMetrics registers the responder's counters on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{solicitations: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "kubefarm", Subsystem: "pxe_ipv6", Name: "router_solicitations_total",
		Help: "IPv6 router solicitations received on the boot interface, by what the responder did with them.",
	}, []string{"result"})}
	if err := reg.Register(m.solicitations); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Metrics) count(outcome string) {
	if m != nil {
		m.solicitations.WithLabelValues(outcome).Inc()
	}
}

// Responder answers router solicitations on one interface.
type Responder struct {
	conn    *ndp.Conn
	ifName  string
	answer  *ndp.RouterAdvertisement
	limit   *rate.Limiter
	metrics *Metrics
	log     logr.Logger
}

// ErrNoLinkLocal: the interface has no IPv6 link-local address to answer
// from (IPv6 disabled on it). Callers may run without a responder.
var ErrNoLinkLocal = errors.New("no IPv6 link-local address")

// Listen opens the interface's ICMPv6 socket from its link-local address,
// joined to the all-routers group and filtered to router solicitations.
// perSecond and burst bound the answers (0 means the defaults).
func Listen(ifName string, perSecond float64, burst int, m *Metrics, log logr.Logger) (*Responder, error) {
	ifi, err := net.InterfaceByName(ifName)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", ifName, err)
	}
	conn, _, err := ndp.Listen(ifi, ndp.LinkLocal)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w: %v", ifName, ErrNoLinkLocal, err)
	}
	var f ipv6.ICMPFilter
	f.SetAll(true)
	f.Accept(ipv6.ICMPTypeRouterSolicitation)
	if err := conn.SetICMPFilter(&f); err != nil {
		conn.Close()
		return nil, fmt.Errorf("interface %s: ICMPv6 filter: %w", ifName, err)
	}
	// The hop limit tells a neighbour's solicitation (255) from one
	// routed here from elsewhere, which RFC 4861 6.1.1 says to drop.
	if err := conn.SetControlMessage(ipv6.FlagHopLimit, true); err != nil {
		conn.Close()
		return nil, fmt.Errorf("interface %s: ICMPv6 control messages: %w", ifName, err)
	}
	if err := conn.JoinGroup(netip.IPv6LinkLocalAllRouters()); err != nil {
		conn.Close()
		return nil, fmt.Errorf("interface %s: joining all-routers: %w", ifName, err)
	}
	if perSecond <= 0 {
		perSecond = DefaultRate
	}
	if burst <= 0 {
		burst = DefaultBurst
	}
	return &Responder{conn: conn, ifName: ifName, answer: Advertisement(ifi.HardwareAddr),
		limit: rate.NewLimiter(rate.Limit(perSecond), burst), metrics: m, log: log}, nil
}

// Serve answers solicitations, one at a time on this goroutine, until ctx
// ends; it closes the socket when it returns.
func (r *Responder) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { _ = r.conn.SetReadDeadline(time.Now()) })
	defer stop()
	defer r.conn.Close()
	for {
		msg, cm, src, err := r.conn.ReadFrom()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("reading ICMPv6 on %s: %w", r.ifName, err)
		}
		if _, ok := msg.(*ndp.RouterSolicitation); !ok {
			continue
		}
		if cm == nil || cm.HopLimit != ndp.HopLimit {
			r.metrics.count(Routed)
			continue
		}
		if !r.limit.Allow() {
			r.metrics.count(Limited)
			continue
		}
		if err := r.conn.WriteTo(r.answer, nil, Destination(src)); err != nil {
			r.metrics.count(Failed)
			r.log.V(1).Info("router advertisement not sent", "to", src.String(), "error", err.Error())
			continue
		}
		r.metrics.count(Answered)
		r.log.V(2).Info("answered a router solicitation", "from", src.String())
	}
}

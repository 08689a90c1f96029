package fetchguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// MaxRedirects bounds the redirects one URL artifact fetch follows.
const MaxRedirects = 5

// Options configure a Guard.
type Options struct {
	// Denied are refused on top of DefaultDenied (class ClassDenied): the
	// admin cluster's Service and Pod ranges, --fetch-denied-cidrs.
	Denied []netip.Prefix
	// Allowed are exceptions that win over DefaultDenied and Denied
	// (--fetch-allowed-cidrs), e.g. a registry on a denied private range.
	Allowed []netip.Prefix
	// APIServer are the admin cluster's API server addresses; they are
	// refused even when Allowed holds them.
	APIServer []netip.Addr
}

// Guard refuses connections to the addresses its Policy denies.
type Guard struct {
	policy Policy
}

// New is a Guard over DefaultDenied plus o.
func New(o Options) *Guard {
	p := Policy{Denied: DefaultDenied()}
	for _, a := range o.APIServer {
		a = a.Unmap().WithZone("")
		if a.IsValid() {
			p.Always = append(p.Always, Rule{netip.PrefixFrom(a, a.BitLen()), ClassAPIServer})
		}
	}
	for _, d := range o.Denied {
		p.Denied = append(p.Denied, Rule{normalize(d), ClassDenied})
	}
	for _, a := range o.Allowed {
		p.Allowed = append(p.Allowed, normalize(a))
	}
	return &Guard{policy: p}
}

// Policy is the guard's policy, for logs and tests.
func (g *Guard) Policy() Policy { return g.policy }

// normalize turns an IPv4-mapped IPv6 prefix (::ffff:10.0.0.0/104) into
// the IPv4 prefix it means, since Decide unmaps addresses, and masks it.
func normalize(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked()
	}
	return p.Masked()
}

// ParsePrefixes parses a comma-separated list of CIDR prefixes (spaces
// allowed, empty entries skipped); a bare address is its own /32 or
// /128. flag names the list in errors.
func ParsePrefixes(flag, s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("%s: %q is neither a CIDR prefix nor an IP address", flag, f)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a CIDR prefix: %v", flag, f, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// RefusedError is the error of a connection the guard refused. It is
// never temporary: retrying the same address is refused again.
type RefusedError struct {
	Decision
}

func (e *RefusedError) Error() string {
	return "refused to connect: " + e.Reason()
}

// Check is nil when addr may be connected to, else a *RefusedError.
func (g *Guard) Check(addr netip.Addr) error {
	if d := Decide(addr, g.policy); !d.Allowed {
		return &RefusedError{d}
	}
	return nil
}

// Control is a net.Dialer Control hook. The dialer calls it for every
// connection attempt (each address of a name, each Happy Eyeballs race)
// once the socket exists and before connect(2), with the numeric address
// about to be connected to; an error aborts the attempt.
func (g *Guard) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		// Only TCP and UDP over IP are dialed here; anything else is
		// not something to allow by accident.
		return &RefusedError{Decision{}}
	}
	return g.Check(ap.Addr())
}

// Dialer is a net.Dialer whose every connection passes Control.
func (g *Guard) Dialer() *net.Dialer {
	return &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: g.Control}
}

// Transport is an HTTP transport whose connections all go through
// Dialer. It uses no proxy, whatever the environment says: a proxy would
// make the connection to the proxy the only one checked, and the proxy
// would reach the denied addresses for us.
func (g *Guard) Transport() *http.Transport {
	// http.DefaultTransport's settings, built here rather than cloned:
	// another package may have replaced http.DefaultTransport.
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           g.Dialer().DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 1 * time.Second,
	}
}

// ErrTooManyRedirects is returned by Client's fetches after MaxRedirects.
var ErrTooManyRedirects = errors.New("too many redirects")

// Client fetches over t, which should be g.Transport(). Redirects need no
// check of their own: each new connection they cause is dialed by the
// same guarded dialer, so a redirect to a denied address is refused
// before it is connected to. They are bounded all the same.
func Client(t http.RoundTripper) *http.Client {
	return &http.Client{Transport: t, CheckRedirect: func(_ *http.Request, via []*http.Request) error {
		if len(via) > MaxRedirects {
			return fmt.Errorf("%w (more than %d)", ErrTooManyRedirects, MaxRedirects)
		}
		return nil
	}}
}

// Resolver looks names up; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// HostAddrs resolves the host of a rest.Config Host ("https://name:6443",
// "name:6443", "10.96.0.1") to its addresses, with r (nil:
// net.DefaultResolver) when it is a name.
func HostAddrs(ctx context.Context, r Resolver, host string) ([]netip.Addr, error) {
	h := host
	if strings.Contains(h, "://") {
		u, err := url.Parse(h)
		if err != nil {
			return nil, fmt.Errorf("API server %q: %w", host, err)
		}
		h = u.Hostname()
	} else if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if h == "" {
		return nil, fmt.Errorf("API server %q: no host", host)
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return []netip.Addr{a.Unmap().WithZone("")}, nil
	}
	if r == nil {
		r = net.DefaultResolver
	}
	addrs, err := r.LookupNetIP(ctx, "ip", h)
	if err != nil {
		return nil, fmt.Errorf("API server %q: %w", host, err)
	}
	for i, a := range addrs {
		addrs[i] = a.Unmap().WithZone("")
	}
	return addrs, nil
}

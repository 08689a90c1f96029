// Package alertgate reads the firing alerts of the Prometheus-compatible
// APIs an operator named (kubefarm-manager --alert-source name=URL), for the
// rollout's alert gate: while alerts matching a pool's patterns fire, none
// of the pool's machines starts an update (as kured's --prometheus-url and
// --alert-filter-regexp hold its reboots).
//
// A pool names a source, never an address: the operator decides which
// servers the manager asks. Each read is bounded (a timeout, an answer
// size) and shared for MaxAge by every pool that names the source, so a
// farm of pools costs the alert server one request per source every few
// seconds, not one per pool and pass.
package alertgate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/kubefarm/kubefarm/internal/conditions"
)

// Defaults.
const (
	DefaultTimeout = 10 * time.Second
	// DefaultMaxBytes bounds an answer of the alerts API.
	DefaultMaxBytes = 16 << 20
	// DefaultMaxAge is how long one read of a source serves every pool.
	DefaultMaxAge = 5 * time.Second
	// MaxPattern bounds an include or exclude pattern.
	MaxPattern = 1024
)

// namePattern is what a source's name may look like: a DNS label, as the
// pool's spec.rollout.alertGate.source is checked.
var namePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ParseSource splits a --alert-source value, name=URL, and checks both:
// the URL is http or https with a host and without credentials (put those
// in a proxy in front of the server, not on the manager's command line).
func ParseSource(v string) (name, rawURL string, err error) {
	name, rawURL, ok := strings.Cut(v, "=")
	if !ok {
		return "", "", fmt.Errorf("%q is not name=URL", v)
	}
	if !namePattern.MatchString(name) {
		return "", "", fmt.Errorf("source name %q: lower-case letters, digits and '-', at most 63, starting and ending alphanumeric", name)
	}
	u, err := url.Parse(rawURL)
	switch {
	case err != nil:
		return "", "", fmt.Errorf("source %s: the URL does not parse", name)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", "", fmt.Errorf("source %s: the URL's scheme is %q, not http or https", name, u.Scheme)
	case u.Host == "":
		return "", "", fmt.Errorf("source %s: the URL has no host", name)
	case u.User != nil:
		return "", "", fmt.Errorf("source %s: the URL carries credentials; the manager's flags are visible to anyone who can read its pod", name)
	}
	return name, rawURL, nil
}

// Filter selects alerts by their alertname: include (empty: all) and not
// exclude (empty: none), each an RE2 pattern matched against the whole
// name.
type Filter struct {
	include, exclude *regexp.Regexp
}

// Compile builds a Filter; its errors name the pattern's field.
func Compile(include, exclude string) (Filter, error) {
	var f Filter
	var err error
	if f.include, err = anchored("include", include); err != nil {
		return Filter{}, err
	}
	if f.exclude, err = anchored("exclude", exclude); err != nil {
		return Filter{}, err
	}
	return f, nil
}

func anchored(field, p string) (*regexp.Regexp, error) {
	if p == "" {
		return nil, nil
	}
	if len(p) > MaxPattern {
		return nil, fmt.Errorf("%s: %d bytes; at most %d", field, len(p), MaxPattern)
	}
	re, err := regexp.Compile(`^(?:` + p + `)$`)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return re, nil
}

// Matches tells whether an alert of this name counts.
func (f Filter) Matches(name string) bool {
	return (f.include == nil || f.include.MatchString(name)) && (f.exclude == nil || !f.exclude.MatchString(name))
}

// Alert is a firing alert: its name and labels.
type Alert struct {
	Name   string
	Labels map[string]string
}

// maxNameText bounds one alert name in Summary: a condition message quotes
// it, and a label value has no bound of its own.
const maxNameText = 128

// Summary names up to max alert names with their counts, most first:
// "HighLatency (3), DiskFull (1)".
func Summary(alerts []Alert, max int) string {
	counts := map[string]int{}
	for _, a := range alerts {
		counts[a.Name]++
	}
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if counts[names[i]] != counts[names[j]] {
			return counts[names[i]] > counts[names[j]]
		}
		return names[i] < names[j]
	})
	parts := make([]string, 0, min(len(names), max))
	for i, n := range names {
		if i == max {
			parts = append(parts, fmt.Sprintf("and %d more", len(names)-max))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%d)", conditions.Clip(n, maxNameText), counts[n]))
	}
	return strings.Join(parts, ", ")
}

// Options configure Sources.
type Options struct {
	// Timeout bounds one read (DefaultTimeout when 0).
	Timeout time.Duration
	// MaxBytes bounds one answer (DefaultMaxBytes when 0).
	MaxBytes int64
	// MaxAge is how long a read is shared (DefaultMaxAge when 0).
	MaxAge time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Auth are the --alert-source-auth values, name=DIR: a source's CA and
	// credentials (files AuthFileCA, AuthFileToken or AuthFileUsername and
	// AuthFilePassword).
	Auth []string
}

// Sources are the operator's alert sources by name.
type Sources struct {
	o       Options
	sources map[string]*source
}

// source is one server and its last read.
type source struct {
	api promv1.API
	// mu is held during a read, so pools asking at once share it.
	mu     sync.Mutex
	at     time.Time
	firing []Alert
	err    error
}

// New builds the sources of the --alert-source values.
func New(values []string, o Options) (*Sources, error) {
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxAge == 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Sources{o: o, sources: map[string]*source{}}
	auth, err := authDirs(o.Auth)
	if err != nil {
		return nil, err
	}
	for _, v := range values {
		name, raw, err := ParseSource(v)
		if err != nil {
			return nil, err
		}
		if _, dup := s.sources[name]; dup {
			return nil, fmt.Errorf("source %s is named twice", name)
		}
		// No proxy from the environment, and a bounded answer.
		tr := &http.Transport{Proxy: nil, ResponseHeaderTimeout: o.Timeout, MaxIdleConnsPerHost: 2, IdleConnTimeout: 90 * time.Second}
		var rt http.RoundTripper = tr
		if dir, ok := auth[name]; ok {
			tc, cr, err := loadAuth(name, dir)
			if err != nil {
				return nil, err
			}
			tr.TLSClientConfig = tc
			rt = authenticate{next: tr, cr: cr}
		}
		c, err := api.NewClient(api.Config{Address: raw, RoundTripper: limitBody{rt, o.MaxBytes}})
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", name, err)
		}
		s.sources[name] = &source{api: promv1.NewAPI(c)}
	}
	for name := range auth {
		if !s.Has(name) {
			return nil, fmt.Errorf("--alert-source-auth names source %s, which no --alert-source defines", name)
		}
	}
	return s, nil
}

// authDirs maps each --alert-source-auth value's source to its directory,
// refusing a source named twice (New refuses one no --alert-source
// defines).
func authDirs(auth []string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range auth {
		name, dir, err := ParseAuth(v)
		if err != nil {
			return nil, err
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("--alert-source-auth names source %s twice", name)
		}
		out[name] = dir
	}
	return out, nil
}

// Names are the configured sources, sorted.
func (s *Sources) Names() []string {
	out := make([]string, 0, len(s.sources))
	for n := range s.sources {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Has tells whether a source of that name is configured.
func (s *Sources) Has(name string) bool {
	if s == nil {
		return false
	}
	_, ok := s.sources[name]
	return ok
}

// ErrUnknownSource: no --alert-source of that name.
var ErrUnknownSource = errors.New("no such alert source")

// Firing returns the source's firing alerts that f matches. Pending and
// inactive alerts never count. A read younger than MaxAge is reused,
// whether it succeeded or failed.
func (s *Sources) Firing(ctx context.Context, name string, f Filter) ([]Alert, error) {
	src, ok := s.sources[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q (configured: %s)", ErrUnknownSource, name, strings.Join(s.Names(), ", "))
	}
	all, err := src.read(ctx, s.o)
	if err != nil {
		return nil, err
	}
	var out []Alert
	for _, a := range all {
		if f.Matches(a.Name) {
			out = append(out, a)
		}
	}
	return out, nil
}

// read returns the source's firing alerts, shared for MaxAge.
func (src *source) read(ctx context.Context, o Options) ([]Alert, error) {
	src.mu.Lock()
	defer src.mu.Unlock()
	now := o.Now()
	if !src.at.IsZero() && now.Sub(src.at) < o.MaxAge {
		return src.firing, src.err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	res, err := src.api.Alerts(ctx)
	src.at, src.firing, src.err = o.Now(), nil, err
	if err != nil {
		src.err = fmt.Errorf("reading its alerts: %w", err)
		return nil, src.err
	}
	for _, a := range res.Alerts {
		if a.State != promv1.AlertStateFiring {
			continue
		}
		labels := make(map[string]string, len(a.Labels))
		for k, v := range a.Labels {
			labels[string(k)] = string(v)
		}
		src.firing = append(src.firing, Alert{Name: labels["alertname"], Labels: labels})
	}
	return src.firing, nil
}

// limitBody cuts every answer at max bytes with an error
// (http.MaxBytesError), so a server (or something posing as one) cannot
// fill the manager's memory.
type limitBody struct {
	rt  http.RoundTripper
	max int64
}

func (l limitBody) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.rt.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	// No ResponseWriter: this is a client's answer, nothing to close.
	resp.Body = http.MaxBytesReader(nil, resp.Body, l.max)
	return resp, nil
}

// Package notify posts the rollout's notifications (a drain starting, a
// reboot verified, a halt) to a webhook an operator chose, as kured's
// --notify-url does, without ever holding the rollout up.
//
// The rollout only enqueues: Send never blocks and never fails the pass. One
// sender goroutine delivers in order, each post bounded by a timeout; what
// may pass (a refused or reset connection, a timeout, HTTP 408, 425, 429 or
// 5xx) is posted again, at most twice, after 1 s and 2 s. A full queue, a
// dead or slow receiver, a refused address are counted in
// kubefarm_rollout_notifications_total (retries in
// kubefarm_rollout_notification_retries_total) and logged without the URL
// (a chat webhook's URL is its credential).
//
// The body is JSON with a "text" field, the shape Slack, Mattermost,
// Rocket.Chat and Google Chat incoming webhooks read, and the facts beside
// it for a receiver of one's own.
//
// Every connection goes through a fetchguard.Guard: the URL comes from a
// Secret a NodePool author chose, so without the guard a pool author could
// make the manager post to loopback, the cloud's metadata service or the
// admin cluster's API server.
package notify

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"text/template"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kubefarm/kubefarm/internal/fetchguard"
)

// The events a rollout notifies.
const (
	// EventDrainStarting: a machine's node is about to be drained (its
	// update was cordoned).
	EventDrainStarting = "DrainStarting"
	// EventRebootVerified: a machine came back on its new image and its
	// node stayed Ready (before its uncordon).
	EventRebootVerified = "RebootVerified"
	// EventRolloutHalted: failed updates exceeded the pool's failure
	// budget; nothing starts until an operator retries.
	EventRolloutHalted = "RolloutHalted"
)

// Defaults.
const (
	DefaultQueue   = 256
	DefaultTimeout = 10 * time.Second
	// DefaultAttempts bounds the posts of one notification: the first and
	// two retries. With the default timeout and backoff a dead receiver
	// costs a notification at most 33 s, during which later ones wait in
	// the queue (delivery stays in order).
	DefaultAttempts = 3
	DefaultBackoff  = time.Second
	// MaxTemplate bounds a template's size, MaxText the text it renders
	// (longer text is cut): chat services refuse large messages anyway.
	MaxTemplate = 4096
	MaxText     = 4096
)

// DefaultTemplate is the text when a pool gives none.
const DefaultTemplate = `kubefarm {{.Event}}: {{.Namespace}}/{{.Pool}} machine {{.Machine}}{{if .Node}} (node {{.Node}}){{end}}{{if .Image}}, image {{.Image}}{{end}}{{if .Detail}}: {{.Detail}}{{end}}`

// Message is one notification's facts; a template reads its fields.
type Message struct {
	Event     string    `json:"event"`
	Namespace string    `json:"namespace"`
	Pool      string    `json:"pool"`
	Machine   string    `json:"machine,omitempty"`
	Node      string    `json:"node,omitempty"`
	Image     string    `json:"image,omitempty"`
	Detail    string    `json:"detail,omitempty"`
	Time      time.Time `json:"time"`
}

// Parse checks a template as Render would use it ("" is DefaultTemplate).
func Parse(tmpl string) (*template.Template, error) {
	if len(tmpl) > MaxTemplate {
		return nil, fmt.Errorf("the template has %d bytes; at most %d", len(tmpl), MaxTemplate)
	}
	if tmpl == "" {
		tmpl = DefaultTemplate
	}
	// No functions beyond text/template's own: a template is a pool
	// author's input, run in the manager.
	return template.New("notify").Option("missingkey=error").Parse(tmpl)
}

// Render is the text of m through tmpl, cut to MaxText bytes.
func Render(tmpl string, m Message) (string, error) {
	t, err := Parse(tmpl)
	if err != nil {
		return "", err
	}
	var b limitedBuffer
	b.max = MaxText
	if err := t.Execute(&b, m); err != nil && !errors.Is(err, errTextFull) {
		return "", err
	}
	return b.String(), nil
}

var errTextFull = errors.New("text full")

// limitedBuffer keeps the first max bytes and then refuses, so that a
// template looping over a long value stops early.
type limitedBuffer struct {
	strings.Builder
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if left := b.max - b.Len(); len(p) > left {
		b.Builder.Write(p[:max(left, 0)])
		return 0, errTextFull
	}
	return b.Builder.Write(p)
}

// body is what is posted.
type body struct {
	Text string `json:"text"`
	Message
}

// Options configure a Notifier.
type Options struct {
	// Guard decides the addresses a post may connect to (nil:
	// fetchguard.New with no options: loopback, link-local and the like
	// refused).
	Guard *fetchguard.Guard
	// Queue is the bound of waiting notifications (DefaultQueue when 0).
	Queue int
	// Timeout bounds one post (DefaultTimeout when 0).
	Timeout time.Duration
	// Attempts bounds the posts of one notification (DefaultAttempts when
	// 0; 1 posts once).
	Attempts int
	// Backoff is the wait before the first retry, doubled before each
	// next one (DefaultBackoff when 0).
	Backoff time.Duration
	// Registerer takes the counter (nil: not registered).
	Registerer prometheus.Registerer
}

// job is one queued post.
type job struct {
	url  string
	body []byte
}

// Notifier queues and posts notifications. It is a controller-runtime
// Runnable that runs on the leader only, so a notification goes out once.
type Notifier struct {
	queue    chan job
	client   *http.Client
	timeout  time.Duration
	attempts int
	backoff  time.Duration
	results  *prometheus.CounterVec
	retries  prometheus.Counter
}

// New is a Notifier; Start runs its sender.
func New(o Options) (*Notifier, error) {
	g := o.Guard
	if g == nil {
		g = fetchguard.New(fetchguard.Options{})
	}
	n := &Notifier{
		queue:    make(chan job, cmp.Or(o.Queue, DefaultQueue)),
		client:   fetchguard.Client(g.Transport()),
		timeout:  cmp.Or(o.Timeout, DefaultTimeout),
		attempts: cmp.Or(o.Attempts, DefaultAttempts),
		backoff:  cmp.Or(o.Backoff, DefaultBackoff),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubefarm_rollout_notifications_total",
			Help: "Rollout notifications by result: sent (2xx), failed (refused address, timeout, other status, after the retries), dropped (queue full), invalid (bad URL or template).",
		}, []string{"result"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kubefarm_rollout_notification_retries_total",
			Help: "Rollout notification posts made again after a failure that may pass (connection refused or reset, timeout, HTTP 408, 425, 429, 5xx).",
		}),
	}
	for _, r := range []string{ResultSent, ResultFailed, ResultDropped, ResultInvalid} {
		n.results.WithLabelValues(r)
	}
	if o.Registerer != nil {
		if err := o.Registerer.Register(n.results); err != nil {
			return nil, fmt.Errorf("registering kubefarm_rollout_notifications_total: %w", err)
		}
		if err := o.Registerer.Register(n.retries); err != nil {
			return nil, fmt.Errorf("registering kubefarm_rollout_notification_retries_total: %w", err)
		}
	}
	return n, nil
}

// Results of a notification, the counter's label.
const (
	ResultSent    = "sent"
	ResultFailed  = "failed"
	ResultDropped = "dropped"
	ResultInvalid = "invalid"
)

// Counter is the results counter (tests read it).
func (n *Notifier) Counter() *prometheus.CounterVec { return n.results }

// Retries is the retries counter (tests read it).
func (n *Notifier) Retries() prometheus.Counter { return n.retries }

// CheckURL refuses what is no webhook URL: a scheme other than http or
// https, no host, or credentials in it. The error never quotes the URL.
func CheckURL(raw string) error {
	u, err := url.Parse(strings.TrimSpace(raw))
	switch {
	case err != nil:
		return errors.New("the URL does not parse")
	case u.Scheme != "https" && u.Scheme != "http":
		return fmt.Errorf("the URL's scheme is %q; only https and http are posted to", u.Scheme)
	case u.Host == "":
		return errors.New("the URL has no host")
	case u.User != nil:
		return errors.New("the URL carries user credentials; put a token in its path or query as the receiver expects")
	}
	return nil
}

// Send queues m for rawURL with text from tmpl. It never blocks: a full
// queue drops the notification (counted). It reports whether it was
// queued, and why not.
func (n *Notifier) Send(rawURL, tmpl string, m Message) error {
	if err := CheckURL(rawURL); err != nil {
		n.results.WithLabelValues(ResultInvalid).Inc()
		return err
	}
	text, err := Render(tmpl, m)
	if err != nil {
		n.results.WithLabelValues(ResultInvalid).Inc()
		return fmt.Errorf("rendering the template: %w", err)
	}
	b, err := json.Marshal(body{Text: text, Message: m})
	if err != nil {
		n.results.WithLabelValues(ResultInvalid).Inc()
		return err
	}
	select {
	case n.queue <- job{url: strings.TrimSpace(rawURL), body: b}:
		return nil
	default:
		n.results.WithLabelValues(ResultDropped).Inc()
		return fmt.Errorf("the notification queue is full (%d waiting)", cap(n.queue))
	}
}

// NeedLeaderElection: only the leader's rollout notifies.
func (n *Notifier) NeedLeaderElection() bool { return true }

// Start delivers queued notifications in order until ctx ends.
func (n *Notifier) Start(ctx context.Context) error {
	lg := log.FromContext(ctx).WithName("notify")
	for {
		select {
		case <-ctx.Done():
			return nil
		case j := <-n.queue:
			if err := n.deliver(ctx, j); err != nil {
				n.results.WithLabelValues(ResultFailed).Inc()
				// The URL is a credential: the error names the host at most.
				lg.Info("a rollout notification was not delivered", "reason", err.Error())
				continue
			}
			n.results.WithLabelValues(ResultSent).Inc()
		}
	}
}

// deliver posts j, again after a failure that may pass, at most attempts
// times in all.
func (n *Notifier) deliver(ctx context.Context, j job) error {
	wait := n.backoff
	for attempt := 1; ; attempt++ {
		err := n.post(ctx, j)
		var pe *postError
		if err == nil || attempt >= n.attempts || !errors.As(err, &pe) || !pe.transient {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait *= 2
		n.retries.Inc()
	}
}

// postError is a failed post: its text names the host at most, and
// transient says whether posting again may succeed.
type postError struct {
	msg       string
	transient bool
}

func (e *postError) Error() string { return e.msg }

// transientStatus: the receiver may take the same post later.
func transientStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	}
	return code >= 500
}

// post delivers one notification within the timeout.
func (n *Notifier) post(ctx context.Context, j job) error {
	ctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, j.url, bytes.NewReader(j.body))
	if err != nil {
		return errors.New("the URL does not make a request")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "kubefarm-rollout")
	host := req.URL.Host
	resp, err := n.client.Do(req)
	if err != nil {
		kind, transient := failureKind(err)
		return &postError{msg: fmt.Sprintf("posting to %s: %s", host, kind), transient: transient}
	}
	defer func() { _ = resp.Body.Close() }()
	// Read a little of the answer so the connection can be reused.
	_, _ = io.CopyN(io.Discard, resp.Body, 4096)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &postError{msg: fmt.Sprintf("posting to %s: status %d", host, resp.StatusCode), transient: transientStatus(resp.StatusCode)}
	}
	return nil
}

// failureKind says what went wrong without quoting the error, whose text
// carries the whole URL (url.Error), and whether posting again may pass: a
// refused address, a redirect loop, a name that does not resolve or an
// untrusted certificate will not change in seconds.
func failureKind(err error) (string, bool) {
	var refused *fetchguard.RefusedError
	var ne net.Error
	switch {
	case errors.As(err, &refused):
		return refused.Error(), false
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timed out", true
	case errors.Is(err, fetchguard.ErrTooManyRedirects):
		return "too many redirects", false
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused", true
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset", true
	case errors.As(err, new(*net.DNSError)):
		return "the host name did not resolve", false
	case errors.As(err, new(x509.UnknownAuthorityError)), errors.As(err, new(x509.HostnameError)), errors.As(err, new(*tls.CertificateVerificationError)):
		return "the receiver's certificate was not trusted", false
	default:
		return "the request failed", false
	}
}

// Package pxeclient is the agent's side of kubefarm-pxe's /config, /report
// and /heartbeat (pxe/httpboot/agent.go, heartbeat.go): bounded requests,
// retried with backoff while retrying can help. And of /discovery
// (pxe/httpboot/discovery.go): one bounded request at a time, without a
// secret, which the discovery loop repeats at its own pace.
//
// kubefarm-pxe authenticates every request by the boot's secret (package
// bootsecret: the initrd received it from kubefarm-pxe and left it in a
// root-only file), sent as a bearer token, and by where it comes from: the
// machine's leased IP, for one of its MACs. /config is answered once per
// boot. So a request must leave from the boot interface's address (the
// kernel picks it for the route to the server on a flat boot network),
// name the boot interface's MAC, carry the secret, and a 403 is final: the
// window is used or gone, or the secret is not this boot's, and only a new
// boot brings another.
//
// The configuration carries a join token and the requests the secret:
// nothing here logs a NodeConfig or a request, or puts either into an
// error.
package pxeclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/kubefarm/kubefarm/pxe/bootpaths"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
	"github.com/kubefarm/kubefarm/pxe/bootsecret"
	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

// MaxConfig bounds the /config answer: a real one is a few kilobytes (the
// CA certificate is the largest part).
const MaxConfig = 1 << 20

// maxErrorBody bounds how much of an error answer is read into a message.
const maxErrorBody = 256

// maxReply bounds the /heartbeat answer: a real one is 16 bytes.
const maxReply = 4096

// Client talks to one kubefarm-pxe replica.
type Client struct {
	// Base is kubefarm-pxe's URL from the kernel command line.
	Base bootpaths.Base
	// Secret is this boot's secret, sent with every request.
	Secret bootsecret.Secret
	// HTTP does the requests; nil is a client with RequestTimeout.
	HTTP *http.Client
	// RequestTimeout bounds one request (default 30 s).
	RequestTimeout time.Duration
	// Backoff is the first wait between attempts (default 1 s); it doubles
	// up to MaxBackoff (default 30 s), with up to 20% jitter so that a rack
	// powered on at once does not retry in step.
	Backoff, MaxBackoff time.Duration
	// Attempts bounds the attempts of one call (default 20, about eight
	// minutes with the default backoff); the caller's context bounds them
	// too.
	Attempts int
	Log      logr.Logger
	// sleep waits between attempts; tests replace it.
	sleep func(context.Context, time.Duration) error
}

// StatusError is an answer that is not a success.
type StatusError struct {
	Op   string // "GET /config/<mac>", "POST /report"
	Code int
	Body string // the start of the body, for the log; never a NodeConfig
	// RetryAfter is the answer's Retry-After in seconds (a 429's), at
	// most maxRetryAfter; 0 when it has none.
	RetryAfter time.Duration
}

// maxRetryAfter bounds what a Retry-After may ask of the agent.
const maxRetryAfter = time.Hour

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: HTTP %d: %s", e.Op, e.Code, e.Body)
}

// retryable: the server's failures that a later attempt may not meet. 503
// is what kubefarm-pxe answers while the tenant's token issuer credential
// or facts are not there yet, or the tenant API is down; it keeps the boot
// window open for the retry. 403 (no window, wrong address, unknown MAC)
// and 400 are final.
func retryable(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code == http.StatusServiceUnavailable || se.Code == http.StatusTooManyRequests ||
			se.Code == http.StatusBadGateway || se.Code == http.StatusGatewayTimeout || se.Code == http.StatusInternalServerError
	}
	var de *decodeError
	// Transport errors (refused, reset, timeout) are retried; a body that
	// does not decode will not decode better next time.
	return !errors.As(err, &de)
}

type decodeError struct{ err error }

func (e *decodeError) Error() string { return e.err.Error() }
func (e *decodeError) Unwrap() error { return e.err }

func (c *Client) defaults() {
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.HTTP == nil {
		c.HTTP = &http.Client{Timeout: c.RequestTimeout}
	}
	if c.Backoff <= 0 {
		c.Backoff = time.Second
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 30 * time.Second
	}
	if c.Attempts <= 0 {
		c.Attempts = 20
	}
	if c.sleep == nil {
		c.sleep = sleepCtx
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// retry runs once until it succeeds, fails for good, or the attempts or ctx
// run out.
func (c *Client) retry(ctx context.Context, op string, once func(context.Context) error) error {
	c.defaults()
	wait := c.Backoff
	var err error
	for attempt := 1; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, c.RequestTimeout)
		err = once(rctx)
		cancel()
		if err == nil || !retryable(err) || attempt >= c.Attempts || ctx.Err() != nil {
			break
		}
		d := wait + time.Duration(rand.Int64N(int64(wait)/5+1))
		c.Log.Info("retrying", "op", op, "attempt", attempt, "in", d.Round(time.Millisecond).String(), "error", err.Error())
		if serr := c.sleep(ctx, d); serr != nil {
			return fmt.Errorf("%s: %w (last error: %v)", op, serr, err)
		}
		wait = min(2*wait, c.MaxBackoff)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// FetchConfig gets the node configuration of the machine with mac (the
// boot NIC's, lower-case colon form).
func (c *Client) FetchConfig(ctx context.Context, mac string) (nodeconfig.NodeConfig, error) {
	var nc nodeconfig.NodeConfig
	url := c.Base.Config(mac)
	err := c.retry(ctx, "GET /config/"+mac, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return &decodeError{err}
		}
		bootsecret.SetHeader(req, c.Secret)
		resp, err := c.HTTP.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return statusError("GET /config/"+mac, resp)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, MaxConfig+1))
		if err != nil {
			return err
		}
		if len(body) > MaxConfig {
			return &decodeError{fmt.Errorf("node configuration is over %d bytes", MaxConfig)}
		}
		nc = nodeconfig.NodeConfig{}
		// The body holds the join token: the decoder's error is kept
		// short of quoting it (it names offsets and types, not values).
		if err := json.Unmarshal(body, &nc); err != nil {
			var se *json.SyntaxError
			if errors.As(err, &se) {
				return &decodeError{fmt.Errorf("node configuration is not JSON (offset %d)", se.Offset)}
			}
			return &decodeError{errors.New("node configuration does not decode")}
		}
		return nil
	})
	return nc, err
}

// Report posts the boot report. kubefarm-pxe answers 204, also to a repeat.
func (c *Client) Report(ctx context.Context, rep bootproto.BootReport) error {
	return c.postJSON(ctx, "POST /report", c.Base.Report(), rep, func(resp *http.Response) error {
		if resp.StatusCode/100 != 2 {
			return statusError("POST /report", resp)
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return nil
	})
}

// Heartbeat posts a heartbeat and returns kubefarm-pxe's answer. It is
// retried like the others within ctx, which the caller bounds by its
// heartbeat interval: a heartbeat that fails is only late, the next one
// says the same.
func (c *Client) Heartbeat(ctx context.Context, hb bootproto.Heartbeat) (bootproto.HeartbeatReply, error) {
	var reply bootproto.HeartbeatReply
	err := c.postJSON(ctx, "POST /heartbeat", c.Base.Heartbeat(), hb, func(resp *http.Response) error {
		if resp.StatusCode != http.StatusOK {
			return statusError("POST /heartbeat", resp)
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxReply+1))
		if err != nil {
			return err
		}
		if len(b) > maxReply {
			return &decodeError{fmt.Errorf("heartbeat answer is over %d bytes", maxReply)}
		}
		// Fields this agent does not know are a newer server's.
		reply = bootproto.HeartbeatReply{}
		if err := json.Unmarshal(b, &reply); err != nil {
			return &decodeError{fmt.Errorf("heartbeat answer does not decode: %w", err)}
		}
		return nil
	})
	if err != nil {
		return bootproto.HeartbeatReply{}, err
	}
	return reply, nil
}

// postJSON posts v as JSON to url, retried as c.retry does, and hands each
// answer to check, which reads the body and says whether it will do.
func (c *Client) postJSON(ctx context.Context, op, url string, v any, check func(*http.Response) error) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.retry(ctx, op, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return &decodeError{err}
		}
		req.Header.Set("Content-Type", "application/json")
		bootsecret.SetHeader(req, c.Secret)
		resp, err := c.HTTP.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		return check(resp)
	})
}

func statusError(op string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	se := &StatusError{Op: op, Code: resp.StatusCode, Body: string(bytes.TrimSpace(b))}
	if secs, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && secs > 0 {
		se.RetryAfter = min(time.Duration(secs)*time.Second, maxRetryAfter)
	}
	return se
}

// Discover posts a discovery report once and returns kubefarm-pxe's
// answer; the discovery loop (cmd/kubefarm-agent) decides when to report
// again, from the answer or, on an error, its own backoff and the
// StatusError's RetryAfter. A discovery boot has no secret, so the request
// carries none: kubefarm-pxe checks that it comes from the address a
// catch-all range leases to the report's MAC. A report over
// bootproto.MaxDiscoveryReport is not sent (kubefarm-pxe would refuse
// it); the caller keeps its lists within the API's bounds (agent/facts).
func (c *Client) Discover(ctx context.Context, rep bootproto.DiscoveryReport) (bootproto.DiscoveryAnswer, error) {
	c.defaults()
	const op = "POST " + bootproto.DiscoveryPath
	body, err := json.Marshal(rep)
	if err != nil {
		return bootproto.DiscoveryAnswer{}, err
	}
	if len(body) > bootproto.MaxDiscoveryReport {
		return bootproto.DiscoveryAnswer{}, fmt.Errorf("%s: the report is %d bytes, over %d", op, len(body), bootproto.MaxDiscoveryReport)
	}
	ctx, cancel := context.WithTimeout(ctx, c.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Base.Discovery(), bytes.NewReader(body))
	if err != nil {
		return bootproto.DiscoveryAnswer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return bootproto.DiscoveryAnswer{}, fmt.Errorf("%s: %w", op, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return bootproto.DiscoveryAnswer{}, statusError(op, resp)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxReply+1))
	if err != nil {
		return bootproto.DiscoveryAnswer{}, fmt.Errorf("%s: %w", op, err)
	}
	if len(b) > maxReply {
		return bootproto.DiscoveryAnswer{}, fmt.Errorf("%s: answer is over %d bytes", op, maxReply)
	}
	var a bootproto.DiscoveryAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return bootproto.DiscoveryAnswer{}, fmt.Errorf("%s: answer does not decode: %w", op, err)
	}
	return a, nil
}

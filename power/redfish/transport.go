package redfish

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/kubefarm/kubefarm/power"
)

// defaultBackoff is the wait before the first retry; the second waits
// twice as long. Two retries span under a second: a BMC's web server
// restarting or briefly overloaded, not a BMC that is down.
const defaultBackoff = 300 * time.Millisecond

// maxRetries bounds the retries of one request.
const maxRetries = 2

// httpClient is the client of one operation: TLS verified against t.CA
// (exactly those certificates) or the system roots, unless
// spec.insecureSkipVerify; every request bounded by timeout; transient
// failures retried by retrier.
func httpClient(t power.Target, timeout, backoff time.Duration) (*http.Client, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	switch {
	case t.Spec.InsecureSkipVerify:
		tc.InsecureSkipVerify = true // the caller shows Warning(t)
	case len(t.CA) > 0:
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(t.CA) {
			return nil, errors.New("spec.power.caSecret's ca.crt holds no PEM certificate")
		}
		tc.RootCAs = pool
	}
	if backoff <= 0 {
		backoff = defaultBackoff
	}
	tr := &http.Transport{
		// No proxy from the environment: the BMC's password goes to the
		// BMC's network and nowhere else.
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: timeout}).DialContext,
		TLSClientConfig:       tc,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   1,
	}
	return &http.Client{Transport: &retrier{next: tr, backoff: backoff}, Timeout: timeout}, nil
}

// retrier retries a request at most maxRetries times, after backoff and
// twice backoff, when the BMC refused the connection (nothing was sent) or
// answered 502, 503 or 504 (a gateway or an overloaded service that did
// not act), or answered any 5xx to a request that changes nothing (GET,
// HEAD). A 500 to a POST or PATCH is not retried: the BMC may have acted,
// and a second reset is not what the operator asked for.
type retrier struct {
	next    http.RoundTripper
	backoff time.Duration
}

func (r *retrier) RoundTrip(req *http.Request) (*http.Response, error) {
	wait := r.backoff
	for attempt := 0; ; attempt++ {
		resp, err := r.next.RoundTrip(req)
		if attempt == maxRetries || !retryable(req.Method, resp, err) {
			return resp, err
		}
		if req.Body != nil && req.GetBody == nil {
			return resp, err // the body cannot be sent again
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
		select {
		case <-req.Context().Done():
			if err == nil {
				err = req.Context().Err()
			}
			return nil, err
		case <-time.After(wait):
		}
		wait *= 2
		if req.GetBody != nil {
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, gerr
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
	}
}

// retryable says whether a second try can cure a request's outcome.
func retryable(method string, resp *http.Response, err error) bool {
	if err != nil {
		return errors.Is(err, syscall.ECONNREFUSED)
	}
	switch code := resp.StatusCode; {
	case code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout:
		return true
	case code >= 500:
		return method == http.MethodGet || method == http.MethodHead
	}
	return false
}

// getJSON GETs url (unauthenticated: the service root is public) into v.
func getJSON(ctx context.Context, client *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %w", resp.StatusCode, errNotRedfish)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: %v", errNotRedfish, err)
	}
	return nil
}

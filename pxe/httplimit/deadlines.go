package httplimit

import (
	"net/http"
	"time"
)

// Deadlines bound one request, counted from the end of its header (the
// server's ReadHeaderTimeout bounds the header itself). Zero is no deadline.
type Deadlines struct {
	// Read bounds reading the request, body included. net/http reads the
	// connection in the background while a handler runs and cancels the
	// request's context when that read fails, a passed deadline included:
	// so Read also bounds how long the handler may run with a live
	// context, and must cover the route's longest legitimate wait.
	Read time.Duration
	// Write bounds writing the response: a handler's writes after it fail
	// and the connection is closed.
	Write time.Duration
}

// Handler sets every request's read and write deadlines to what deadlines
// says for it, before h serves it. Both are always set, zero clearing
// them: a deadline set on a kept-alive connection would otherwise outlive
// its request and cut the next one. The server itself should set no
// ReadTimeout or WriteTimeout, which would apply to every route alike.
func Handler(h http.Handler, deadlines func(*http.Request) Deadlines) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := deadlines(r)
		rc := http.NewResponseController(w)
		now := time.Now()
		// The errors say the writer cannot set deadlines (not a
		// net/http connection, as under httptest.NewRecorder): nothing
		// to bound then.
		_ = rc.SetReadDeadline(at(now, d.Read))
		_ = rc.SetWriteDeadline(at(now, d.Write))
		h.ServeHTTP(w, r)
	})
}

// at is now+d, or the zero time (no deadline) for d <= 0.
func at(now time.Time, d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return now.Add(d)
}

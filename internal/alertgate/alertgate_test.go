package alertgate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseSource(t *testing.T) {
	checkParse(t, "ParseSource", func(v string) error { _, _, err := ParseSource(v); return err }, map[string]string{
		"prod=http://prometheus.monitoring.svc:9090":  "",
		"alertmanager-2=https://thanos.example.com/x": "",
		"noequals":                       "not name=URL",
		"Prod=http://p:9090":             "source name",
		"-x=http://p:9090":               "source name",
		"prod=ftp://p":                   "scheme",
		"prod=http://":                   "no host",
		"prod=http://user:secret@p:9090": "credentials",
		"prod=%zz":                       "does not parse",
	})
	if _, err := New([]string{"a=http://x:1", "a=http://y:1"}, Options{}); err == nil || !strings.Contains(err.Error(), "named twice") {
		t.Errorf("a duplicate source: %v", err)
	}
}

func TestParseAuth(t *testing.T) {
	checkParse(t, "ParseAuth", func(v string) error { _, _, err := ParseAuth(v); return err }, map[string]string{
		"prod=/etc/kubefarm/alert-sources/prod": "",
		"prod":                                  "not name=DIR",
		"Prod=/x":                               "source name",
		"prod=relative/dir":                     "not an absolute path",
	})
}

// checkParse runs parse (named fn) on each case: "" wants no error,
// anything else an error saying it, and no error may quote "secret".
func checkParse(t *testing.T, fn string, parse func(string) error, cases map[string]string) {
	t.Helper()
	for v, want := range cases {
		err := parse(v)
		if want == "" {
			if err != nil {
				t.Errorf("%s(%q): %v", fn, v, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s(%q) = %v, want an error saying %q", fn, v, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s quotes the password: %v", fn, err)
		}
	}
}

func TestFilter(t *testing.T) {
	for _, tc := range []struct {
		include, exclude string
		name             string
		want             bool
	}{
		{"", "", "Anything", true},
		{"", "Watchdog", "Watchdog", false},
		{"", "Watchdog", "WatchdogX", true}, // anchored: the whole name
		{"Node.*", "", "NodeDown", true},
		{"Node.*", "", "KubeNodeDown", false},
		{"Node.*", "NodeClockSkew", "NodeClockSkew", false},
		{"A|B", "", "B", true},
		{"A|B", "", "AB", false},
	} {
		f, err := Compile(tc.include, tc.exclude)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Matches(tc.name); got != tc.want {
			t.Errorf("include %q exclude %q: Matches(%q) = %t", tc.include, tc.exclude, tc.name, got)
		}
	}
	if _, err := Compile("(", ""); err == nil || !strings.HasPrefix(err.Error(), "include:") {
		t.Errorf("a bad include: %v", err)
	}
	if _, err := Compile("", strings.Repeat("a", MaxPattern+1)); err == nil || !strings.HasPrefix(err.Error(), "exclude:") {
		t.Errorf("a long exclude: %v", err)
	}
}

func TestSummary(t *testing.T) {
	alerts := []Alert{{Name: "B"}, {Name: "A"}, {Name: "B"}, {Name: "C"}, {Name: "D"}}
	if got := Summary(alerts, 2); got != "B (2), A (1), and 2 more" {
		t.Errorf("Summary = %q", got)
	}
	long := strings.Repeat("x", 10000)
	if got := Summary([]Alert{{Name: long}}, 5); len(got) > 200 || !strings.HasSuffix(got, "... (1)") {
		t.Errorf("a 10,000-byte alert name is summarised in %d bytes: %.60q", len(got), got)
	}
}

// alertsServer answers the alerts API with body (a Prometheus-shaped JSON
// document), counting requests; hang makes it never answer.
func alertsServer(t *testing.T, body string, hang bool) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if r.URL.Path != "/api/v1/alerts" {
			http.NotFound(w, r)
			return
		}
		if hang {
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

const threeAlerts = `{"status":"success","data":{"alerts":[
 {"labels":{"alertname":"NodeDown","instance":"a"},"state":"firing","activeAt":"2026-11-27T00:00:00Z","value":"1"},
 {"labels":{"alertname":"Watchdog"},"state":"firing","activeAt":"2026-11-27T00:00:00Z","value":"1"},
 {"labels":{"alertname":"DiskFilling"},"state":"pending","activeAt":"2026-11-27T00:00:00Z","value":"1"}]}}`

func TestFiringSharesReads(t *testing.T) {
	srv, n := alertsServer(t, threeAlerts, false)
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	s, err := New([]string{"prod=" + srv.URL}, Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := Compile("", "Watchdog")
	got, err := s.Firing(context.Background(), "prod", f)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "NodeDown" || got[0].Labels["instance"] != "a" {
		t.Errorf("firing %+v, want NodeDown alone (Watchdog excluded, DiskFilling only pending)", got)
	}
	all, _ := Compile("", "")
	if got, _ := s.Firing(context.Background(), "prod", all); len(got) != 2 {
		t.Errorf("without a filter %d firing, want 2", len(got))
	}
	if n.Load() != 1 {
		t.Errorf("%d requests within MaxAge, want 1", n.Load())
	}
	now = now.Add(DefaultMaxAge)
	if _, err := s.Firing(context.Background(), "prod", all); err != nil || n.Load() != 2 {
		t.Errorf("after MaxAge: %v, %d requests, want a second read", err, n.Load())
	}
	if _, err := s.Firing(context.Background(), "staging", all); !errors.Is(err, ErrUnknownSource) || !strings.Contains(err.Error(), "configured: prod") {
		t.Errorf("an unknown source: %v", err)
	}
}

func TestFiringBounds(t *testing.T) {
	huge := `{"status":"success","data":{"alerts":[` + strings.Repeat(`{"labels":{"alertname":"X"},"state":"firing","value":"1"},`, 20000) + `{}]}}`
	big, _ := alertsServer(t, huge, false)
	hung, _ := alertsServer(t, "", true)
	s, err := New([]string{"big=" + big.URL, "hung=" + hung.URL}, Options{MaxBytes: 64 << 10, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	all, _ := Compile("", "")
	if _, err := s.Firing(context.Background(), "big", all); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("an answer past MaxBytes: %v", err)
	}
	start := time.Now()
	if _, err := s.Firing(context.Background(), "hung", all); err == nil {
		t.Error("a server that never answers gave no error")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a hung source held the read %v", took)
	}
}

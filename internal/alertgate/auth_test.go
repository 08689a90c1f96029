package alertgate_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubefarm/kubefarm/internal/alertgate"
	"github.com/kubefarm/kubefarm/internal/testing/promtest"
)

// twoFiring is an alerts API answer with two firing alerts.
const twoFiring = `{"status":"success","data":{"alerts":[
 {"labels":{"alertname":"NodeDown"},"state":"firing","activeAt":"2026-11-27T00:00:00Z","value":"1"},
 {"labels":{"alertname":"Watchdog"},"state":"firing","activeAt":"2026-11-27T00:00:00Z","value":"1"}]}}`

// authDir writes a credentials directory with the given files.
func authDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestAuthRefusals: what cannot work stops the manager at start, naming
// the source and the file, never a file's content.
func TestAuthRefusals(t *testing.T) {
	src := []string{"prod=https://prometheus.example.com"}
	for _, tc := range []struct {
		name  string
		auth  func(t *testing.T) []string
		wants string
	}{
		{"a source no --alert-source defines", func(t *testing.T) []string { return []string{"other=" + authDir(t, nil)} }, "which no --alert-source defines"},
		{"a source named twice", func(t *testing.T) []string { d := authDir(t, nil); return []string{"prod=" + d, "prod=" + d} }, "twice"},
		{"no such directory", func(*testing.T) []string { return []string{"prod=/nonexistent/kubefarm-alert-auth"} }, "source prod: the credentials directory /nonexistent"},
		{"a token and a username", func(t *testing.T) []string {
			return []string{"prod=" + authDir(t, map[string]string{alertgate.AuthFileToken: "s3cret-token", alertgate.AuthFileUsername: "u", alertgate.AuthFilePassword: "p"})}
		}, "not both"},
		{"a username without a password", func(t *testing.T) []string {
			return []string{"prod=" + authDir(t, map[string]string{alertgate.AuthFileUsername: "u"})}
		}, "has username but no password"},
		{"a password without a username", func(t *testing.T) []string {
			return []string{"prod=" + authDir(t, map[string]string{alertgate.AuthFilePassword: "s3cret-token"})}
		}, "has password but no username"},
		{"a CA that is not PEM", func(t *testing.T) []string {
			return []string{"prod=" + authDir(t, map[string]string{alertgate.AuthFileCA: "s3cret-token"})}
		}, "ca.crt holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := alertgate.New(src, alertgate.Options{Auth: tc.auth(t)})
			if err == nil || !strings.Contains(err.Error(), tc.wants) {
				t.Fatalf("New: %v, want an error saying %q", err, tc.wants)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the error quotes a file's content: %v", err)
			}
		})
	}
}

// TestAuthRealPrometheus: a real Prometheus serving https (a private CA)
// with basic authentication. With the CA and the credentials in the
// source's directory its firing alert is read; without the directory the
// certificate is not trusted; a password changed in the directory (a
// Secret updated in place) is used at the next read, with no restart.
func TestAuthRealPrometheus(t *testing.T) {
	prom := promtest.StartWith(t, `groups:
- name: test
  rules:
  - alert: TestAlarm
    expr: `+promtest.Gauge+` > 0
`, promtest.Options{TLS: true, Username: "kubefarm", Password: "correct-horse"})
	prom.SetAlarm(1)
	prom.WaitAlert(t, "TestAlarm", "firing")
	ca, err := os.ReadFile(prom.CA)
	if err != nil {
		t.Fatal(err)
	}
	dir := authDir(t, map[string]string{alertgate.AuthFileCA: string(ca), alertgate.AuthFileUsername: "kubefarm\n", alertgate.AuthFilePassword: "correct-horse\n"})
	now := time.Now()
	s, err := alertgate.New([]string{"prod=" + prom.URL}, alertgate.Options{Auth: []string{"prod=" + dir}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	all, _ := alertgate.Compile("", "")
	got, err := s.Firing(context.Background(), "prod", all)
	if err != nil {
		t.Fatalf("reading the alerts with the CA and the credentials: %v", err)
	}
	if len(got) != 1 || got[0].Name != "TestAlarm" {
		t.Errorf("firing %+v, want TestAlarm", got)
	}

	if err := os.WriteFile(filepath.Join(dir, alertgate.AuthFilePassword), []byte("wrong"), 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute) // past MaxAge: a new read
	if _, err := s.Firing(context.Background(), "prod", all); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a wrong password in the directory: %v, want a 401", err)
	}

	bare, err := alertgate.New([]string{"prod=" + prom.URL}, alertgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bare.Firing(context.Background(), "prod", all); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v, want a certificate error", err)
	}
}

// TestAuthBearerToken: the token file is sent as a bearer token and read
// again for each request, so a rotated token is used without a restart.
func TestAuthBearerToken(t *testing.T) {
	want := "token-1"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+want {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, twoFiring)
	}))
	t.Cleanup(srv.Close)
	dir := authDir(t, map[string]string{alertgate.AuthFileToken: "token-1\n"})
	now := time.Now()
	s, err := alertgate.New([]string{"prod=" + srv.URL}, alertgate.Options{Auth: []string{"prod=" + dir}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	all, _ := alertgate.Compile("", "")
	if got, err := s.Firing(context.Background(), "prod", all); err != nil || len(got) != 2 {
		t.Fatalf("with the token: %v, %+v", err, got)
	}
	want = "token-2"
	now = now.Add(time.Minute)
	if _, err := s.Firing(context.Background(), "prod", all); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("the server's token changed and the file's did not: %v, want a 401", err)
	}
	if err := os.WriteFile(filepath.Join(dir, alertgate.AuthFileToken), []byte("token-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	if got, err := s.Firing(context.Background(), "prod", all); err != nil || len(got) != 2 {
		t.Errorf("after the token file was rotated: %v, %+v", err, got)
	}
}

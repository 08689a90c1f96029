package httpboot

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"k8s.io/client-go/tools/record"

	"github.com/kubefarm/kubefarm/pxe/bootsecret"
	"github.com/kubefarm/kubefarm/pxe/events"
)

// TestBootEvents walks one machine through an HTTP boot and checks the
// events its object gets: one per stage, Warnings for refusals, and none
// for traffic that does not tell a stage (ranged reads, other hosts).
func TestBootEvents(t *testing.T) {
	f := newHandlerFixture(t, testr.New(t))
	const mac, ip = "02:00:00:00:00:01", "10.0.0.11"
	m := f.machines.machines[mac]
	m.Spec.IP = ip
	f.h.cfg.Windows = NewBootWindows(10*time.Minute, nil)
	f.h.cfg.Tokens = &fakeTokens{}
	f.h.cfg.Recorder = &fakeRecorder{}
	fake := record.NewFakeRecorder(64)
	f.h.cfg.Events = events.New(fake, events.Config{})

	var secret bootsecret.Secret
	req := func(method, path, from, body string, hdr ...string) int {
		r := httptest.NewRequest(method, "http://10.0.0.2:8080"+path, strings.NewReader(body))
		r.RemoteAddr = from
		if secret != "" && path != "/secret/"+mac {
			bootsecret.SetHeader(r, secret)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		f.h.ServeHTTP(w, r)
		return w.Code
	}
	mine, other := ip+":40000", "10.0.0.99:40000"
	report := `{"mac":"` + mac + `","bootID":"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0","imageDigest":"` + sha(f.rootfs) + `"}`
	// What the initrd sends when the root filesystem does not match
	// (images/node/fetch.Report).
	failed := `{"mac":"` + mac + `","bootID":"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0","imageDigest":"` + sha(f.rootfs) +
		`","error":"rootfs digest mismatch: want ` + sha(f.rootfs) + ` got sha256:` + strings.Repeat("0", 64) + `"}`

	steps := []struct {
		name         string
		method, path string
		from, body   string
		hdr          []string
		code         int
		want         string // prefix of the one event recorded; "" for none
	}{
		{"script", "GET", "/boot/" + mac + ".ipxe", mine, "", nil, 200,
			"Normal ScriptServed served the iPXE script for image img1 (root filesystem " + sha(f.rootfs) + ") to 10.0.0.11"},
		{"HEAD of the script tells nothing", "HEAD", "/boot/" + mac + ".ipxe", mine, "", nil, 200, ""},
		{"kernel", "GET", "/artifacts/" + sha(f.kernel), mine, "", nil, 200,
			"Normal ImageServed served the kernel " + sha(f.kernel) + " of image img1 (300000 bytes) to 10.0.0.11"},
		{"initrd", "GET", "/artifacts/" + sha(f.initrd), mine, "", nil, 200,
			"Normal ImageServed served the initrd " + sha(f.initrd)},
		{"a ranged read is not a served image", "GET", "/artifacts/" + sha(f.rootfs), mine, "", []string{"Range", "bytes=0-99"}, 206, ""},
		{"an artifact fetched by a host that is no machine", "GET", "/artifacts/" + sha(f.rootfs), other, "", nil, 200, ""},
		{"root filesystem", "GET", "/artifacts/" + sha(f.rootfs), mine, "", nil, 200,
			"Normal ImageServed served the root filesystem " + sha(f.rootfs)},
		{"secret before the DHCP answer", "GET", "/secret/" + mac, mine, "", nil, 403,
			"Warning Refused refused GET /secret/" + mac + " from 10.0.0.11: no boot in progress"},
		{"config from another address", "GET", "/config/" + mac, other, "", nil, 403,
			"Warning Refused refused GET /config/" + mac + " from 10.0.0.99: not from the machine's leased IP 10.0.0.11"},
		{"config for an unknown MAC names no machine", "GET", "/config/02:00:00:00:00:99", mine, "", nil, 403, ""},
		{"config", "GET", "/config/" + mac, mine, "", nil, 200,
			"Normal ConfigServed served the boot configuration with a join token to 10.0.0.11"},
		{"config replayed", "GET", "/config/" + mac, mine, "", nil, 403,
			"Warning Refused refused GET /config/" + mac + " from 10.0.0.11: no open configuration window"},
		{"the initrd's report of a failed boot", "POST", "/report", mine, failed, nil, 204,
			"Warning BootFailed boot of " + sha(f.rootfs) + " stopped in the initrd: rootfs digest mismatch: want " + sha(f.rootfs) + " got sha256:"},
		{"report", "POST", "/report", mine, report, nil, 204,
			"Normal BootReported booted " + sha(f.rootfs) + ", boot ID 0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"},
	}
	for _, st := range steps {
		if st.name == "config from another address" {
			// The machine's iPXE got its DHCP answer, then its secret.
			f.h.cfg.Windows.Arm(mac)
			w := httptest.NewRecorder()
			r := httptest.NewRequest("GET", "http://10.0.0.2:8080/secret/"+mac, nil)
			r.RemoteAddr = mine
			f.h.ServeHTTP(w, r)
			if w.Code != 200 {
				t.Fatalf("secret: %d", w.Code)
			}
			secret = secretOf(t, w.Body.Bytes())
			if got := <-fake.Events; !strings.HasPrefix(got, "Normal SecretIssued issued this boot's secret to 10.0.0.11") || strings.Contains(got, string(secret)) {
				t.Errorf("secret's event %q", got)
			}
		}
		if code := req(st.method, st.path, st.from, st.body, st.hdr...); code != st.code {
			t.Fatalf("%s: HTTP %d, want %d", st.name, code, st.code)
		}
		var got []string
		for len(fake.Events) > 0 {
			got = append(got, <-fake.Events)
		}
		switch {
		case st.want == "" && len(got) != 0:
			t.Errorf("%s: recorded %q, want nothing", st.name, got)
		case st.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], st.want)):
			t.Errorf("%s: recorded %q, want one event starting %q", st.name, got, st.want)
		}
		for _, e := range got {
			if strings.Contains(e, "abcdef.0123456789abcdef") {
				t.Errorf("%s: an event carries the join token: %q", st.name, e)
			}
		}
	}
}

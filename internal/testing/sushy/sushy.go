// Package sushy runs the real sushy-tools Redfish emulator (OpenStack's,
// vendored unmodified in ../shared/vendor/sushy-tools) in front of a real
// qemu machine managed by libvirt, for the tests of the redfish power
// driver: a BMC that speaks Redfish over HTTPS with basic authentication,
// powers a machine on and off and rewrites its boot device, with no mock of
// ours in between.
//
// Per test, Start makes: a throw-away CA and a server certificate for
// 127.0.0.1, an htpasswd file (bcrypt) for a random password, a tap
// device with a unique name, a libvirt domain (TCG, 128 MiB, a blank
// sparse disk that its boot order names, one e1000 on that tap, so a Pxe
// boot override has a device to point at) and
// sushy-emulator on a free loopback port restricted to that one domain.
// t.Cleanup stops the emulator and removes the domain and the tap.
// StartWith does the same for a machine that really boots (the e2e farm's):
// the emulator on another address of the host, the domain on a tap the
// caller made (enslaved to its boot bridge), with its MAC, memory and a
// serial console written to a file.
//
// libvirtd and virtlogd are system daemons: the first Start of a process
// starts them unless they answer already (the host preparation of
// ENVIRONMENT.md "BMC emulators" included: /var/log/libvirt, the
// libvirt-qemu user, /etc/libvirt/qemu.conf when absent), holding a lock
// file so that two test processes do not share them; Main, the TestMain of
// the packages that use Start, stops what this process started. Nothing
// touches a bridge or iptables: the tap is attached to nothing.
//
// Start skips the test, loudly, only when libvirtd, qemu or the vendored
// sushy-tools is not installed; any other failure fails the test.
package sushy

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubefarm/kubefarm/internal/testing/local"
)

// Main is the TestMain of a package whose tests call Start: it runs them
// and then stops the daemons this process started.
func Main(m *testing.M) {
	mainCalled = true
	code := m.Run()
	stopDaemons()
	os.Exit(code)
}

// Emulator is one running sushy-emulator in front of one qemu machine.
type Emulator struct {
	// Endpoint is https://127.0.0.1:<port>.
	Endpoint string
	// SystemPath is the machine's /redfish/v1/Systems/<id>; the service
	// lists only it.
	SystemPath string
	// Username and Password are the basic-authentication credentials.
	Username, Password string
	// CA is the PEM certificate that signed the emulator's certificate.
	CA []byte
	// Domain is the libvirt domain's name.
	Domain string
	// Log is the emulator's output file.
	Log string

	client *http.Client
}

// sushyDir is the vendored sushy-tools, found from this file's folder
// (/work/main/internal/testing/sushy -> /work/shared/vendor/sushy-tools).
func sushyDir() string {
	if d := os.Getenv("KUBEFARM_SUSHY_TOOLS"); d != "" {
		return d
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "shared", "vendor", "sushy-tools")
}

// Options of StartWith; the zero value is Start's machine.
type Options struct {
	// ListenIP is the host address the emulator listens on and its
	// certificate names; 127.0.0.1 when empty.
	ListenIP string
	// Tap is an existing tap device (made and enslaved to a bridge by the
	// caller, who removes it) for the machine's e1000; when empty Start
	// makes one attached to nothing.
	Tap string
	// MAC of the machine's e1000; libvirt picks one when empty.
	MAC string
	// MemoryMiB of the machine; 128 when zero.
	MemoryMiB int
	// Console is a file the machine's serial console is written to; none
	// when empty.
	Console string
	// SecondTap and SecondMAC, when SecondTap is set, give the machine a
	// second e1000 on that existing tap, without an option ROM (it never
	// boots from it): a bond's second member. SetLink pulls either cable.
	SecondTap string
	SecondMAC string
}

// Start runs an emulator and its machine (powered off) for t.
func Start(t testing.TB) *Emulator { t.Helper(); return StartWith(t, Options{}) }

// StartWith runs an emulator and its machine (powered off) for t, as o
// says. The machine's boot order names only a disk (a 16 MiB sparse file,
// blank), as a server whose disk comes first; a Pxe boot override makes
// the network the boot device. (Whether SeaBIOS would fall through to the
// NIC without the override is not tested.)
func StartWith(t testing.TB, o Options) *Emulator {
	t.Helper()
	o.ListenIP = cmp.Or(o.ListenIP, "127.0.0.1")
	o.MemoryMiB = cmp.Or(o.MemoryMiB, 128)
	listen := net.ParseIP(o.ListenIP)
	if listen == nil {
		t.Fatalf("sushy.Options.ListenIP %q is not an IP address", o.ListenIP)
	}
	dir := sushyDir()
	// Only these three make a skip; anything else missing (virtlogd,
	// Debian's python3 and its modules) is a failure that says what.
	for _, need := range []string{libvirtdBin, qemuBin, filepath.Join(dir, "sushy_tools", "emulator", "main.py")} {
		if _, err := os.Stat(need); err != nil {
			t.Skipf("SKIPPING the Redfish emulator test: %s is not installed (%v); see ENVIRONMENT.md \"BMC emulators\"", need, err)
		}
	}
	if os.Geteuid() != 0 {
		t.Fatal("the Redfish emulator needs root (libvirtd, a tap device)")
	}
	if !mainCalled {
		t.Fatal("call sushy.Main from the package's TestMain: it stops the daemons Start starts")
	}
	if err := ensureDaemons(); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	e := &Emulator{Username: "admin", Password: local.RandomHex(t, 16)}

	caPEM, certFile, keyFile := writePKI(t, tmp, listen)
	e.CA = caPEM
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	e.client = &http.Client{Timeout: 20 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}

	id := local.RandomHex(t, 4)
	e.Domain = "kubefarm-sushy-" + id
	uuid := newUUID(t)
	if o.Tap == "" {
		o.Tap = "kfsushy" + id // 15 characters at most
		run(t, "ip", "tuntap", "add", "dev", o.Tap, "mode", "tap")
		tap := o.Tap
		t.Cleanup(func() { runQuiet("ip", "link", "del", tap) })
	}
	defineDomain(t, tmp, e.Domain, uuid, o)

	htpasswd := filepath.Join(tmp, "htpasswd")
	out, err := exec.Command("/usr/bin/python3", "-c",
		"import bcrypt,sys; sys.stdout.write(bcrypt.hashpw(sys.argv[1].encode(), bcrypt.gensalt(rounds=4)).decode())",
		e.Password).Output()
	if err != nil {
		t.Fatalf("bcrypt for the htpasswd file: %v", err)
	}
	writeFile(t, htpasswd, e.Username+":"+string(out)+"\n")
	config := filepath.Join(tmp, "sushy.conf")
	// The config file is Python. ALLOWED_INSTANCES hides every other
	// libvirt domain on the host from this emulator.
	writeFile(t, config, fmt.Sprintf("SUSHY_EMULATOR_AUTH_FILE = %q\nSUSHY_EMULATOR_ALLOWED_INSTANCES = [%q]\n", htpasswd, uuid))

	port := local.TCPPort(t)
	e.Endpoint = "https://" + net.JoinHostPort(o.ListenIP, fmt.Sprint(port))
	e.Log = filepath.Join(tmp, "sushy.log")
	logf, err := os.Create(e.Log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/python3", "-m", "sushy_tools.emulator.main",
		"-i", o.ListenIP, "-p", fmt.Sprint(port), "--config", config,
		"--ssl-certificate", certFile, "--ssl-key", keyFile, "--libvirt-uri", "qemu:///system")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited); logf.Close() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(e.Log)
			t.Logf("sushy-emulator output:\n%s", tail(b, 4000))
		}
	})

	// Ready when the service lists the system; the emulator names it by
	// the domain's UUID.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var coll struct {
			Members []struct {
				ID string `json:"@odata.id"`
			}
		}
		err := e.Get("/redfish/v1/Systems", &coll)
		if err == nil {
			if len(coll.Members) != 1 {
				t.Fatalf("the emulator lists %d systems, want only the domain %s: %+v", len(coll.Members), uuid, coll.Members)
			}
			e.SystemPath = coll.Members[0].ID
			if e.SystemPath != "/redfish/v1/Systems/"+uuid {
				t.Fatalf("the emulator lists %s, want /redfish/v1/Systems/%s", e.SystemPath, uuid)
			}
			return e
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(e.Log)
			t.Fatalf("sushy-emulator exited: %s", tail(b, 4000))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sushy-emulator did not list the system within 30 s: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // polling the emulator's readiness
	}
}

// Get reads a Redfish resource as the emulator's user, verified by its CA.
func (e *Emulator) Get(path string, v any) error {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, e.Endpoint+path, nil)
	if err != nil {
		return err
	}
	req.SetBasicAuth(e.Username, e.Password)
	resp, err := e.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d: %s", path, resp.StatusCode, body)
	}
	return json.Unmarshal(body, v)
}

// DomainState is virsh domstate of the machine: "running", "shut off", ...
func (e *Emulator) DomainState(t testing.TB) string {
	t.Helper()
	return strings.TrimSpace(run(t, "virsh", "-c", "qemu:///system", "domstate", e.Domain))
}

// DomainID is virsh domid of the running machine: a new one for every
// qemu process, so a hard reset that restarts qemu changes it; "-" when
// it is off.
func (e *Emulator) DomainID(t testing.TB) string {
	t.Helper()
	return strings.TrimSpace(run(t, "virsh", "-c", "qemu:///system", "domid", e.Domain))
}

// defineDomain defines the machine (persistent: sushy powers it on with
// libvirt's create, and rewrites its XML for a boot override, which a
// transient domain cannot take) and removes it at cleanup.
func defineDomain(t testing.TB, dir, name, uuid string, o Options) {
	t.Helper()
	disk := filepath.Join(dir, "disk.raw")
	if err := os.WriteFile(disk, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, 16<<20); err != nil {
		t.Fatal(err)
	}
	var mac, console, second string
	if o.MAC != "" {
		mac = fmt.Sprintf("\n      <mac address='%s'/>", o.MAC)
	}
	if o.Console != "" {
		console = fmt.Sprintf("\n    <serial type='file'><source path='%s'/><target port='0'/></serial>", o.Console)
	}
	if o.SecondTap != "" {
		var mac2 string
		if o.SecondMAC != "" {
			mac2 = fmt.Sprintf("\n      <mac address='%s'/>", o.SecondMAC)
		}
		// After the first interface: the guest's kernel names it eth1.
		second = fmt.Sprintf(`
    <interface type='ethernet'>%s
      <target dev='%s' managed='no'/>
      <model type='e1000'/>
      <rom enabled='no'/>
    </interface>`, mac2, o.SecondTap)
	}
	xml := fmt.Sprintf(`<domain type='qemu'>
  <name>%s</name>
  <uuid>%s</uuid>
  <memory unit='MiB'>%d</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os>
  <on_reboot>restart</on_reboot>
  <devices>
    <emulator>%s</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/>
      <source file='%s'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <interface type='ethernet'>%s
      <target dev='%s' managed='no'/>
      <model type='e1000'/>
    </interface>%s%s
  </devices>
</domain>
`, name, uuid, o.MemoryMiB, qemuBin, disk, mac, o.Tap, second, console)
	path := filepath.Join(dir, "domain.xml")
	writeFile(t, path, xml)
	run(t, "virsh", "-c", "qemu:///system", "define", path)
	t.Cleanup(func() {
		runQuiet("virsh", "-c", "qemu:///system", "destroy", name)
		runQuiet("virsh", "-c", "qemu:///system", "undefine", name)
	})
}

// Destroy pulls the machine's plug (virsh destroy), as a test's own act
// rather than the BMC's.
func (e *Emulator) Destroy(t testing.TB) {
	t.Helper()
	run(t, "virsh", "-c", "qemu:///system", "destroy", e.Domain)
}

// SetLink plugs (up) or pulls (down) the cable of the machine's NIC on tap,
// as a switch port going dark would: the guest sees its carrier go.
func (e *Emulator) SetLink(t testing.TB, tap string, up bool) {
	t.Helper()
	state := "down"
	if up {
		state = "up"
	}
	run(t, "virsh", "-c", "qemu:///system", "domif-setlink", e.Domain, tap, state)
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

func runQuiet(name string, args ...string) { _ = exec.Command(name, args...).Run() }

func writeFile(t testing.TB, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func newUUID(t testing.TB) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

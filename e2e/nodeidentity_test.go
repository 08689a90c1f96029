//go:build e2e

package e2e

// The node identity step of the join scenario (docs/security.md): on the
// machines the join already booted, what a tenant's ordinary pod and what
// root on one node can do against kubefarm-pxe and the tenant's
// certificate signer. No machine boots for it.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubefarm/kubefarm/e2e/cluster"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
)

// identityTarget is what the step needs to know of the scenario.
type identityTarget struct {
	tenantCfg *rest.Config
	tenant    kubernetes.Interface
	server    string // kubefarm-pxe's host:port on the boot network
	// node1 runs the pod "client" in default; node2 is the other machine.
	node1, node2 *joinVM
}

// rawHTTP is a busybox shell command that sends one HTTP/1.0 request to
// server through nc and prints what comes back (nothing when the packets
// are dropped): busybox's static wget crashes in glibc's static NSS.
func rawHTTP(server, method, path, auth, body string) string {
	host, port, _ := strings.Cut(server, ":")
	req := method + " " + path + " HTTP/1.0\\r\\nHost: " + server + "\\r\\n"
	if auth != "" {
		req += "Authorization: Bearer " + auth + "\\r\\n"
	}
	if body != "" {
		req += fmt.Sprintf("Content-Type: application/json\\r\\nContent-Length: %d\\r\\n", len(body))
	}
	req += "\\r\\n" + strings.ReplaceAll(body, `"`, `\"`)
	return `printf "` + req + `" | /bin/busybox nc -w 5 ` + host + " " + port + "; true"
}

func checkNodeIdentity(ctx context.Context, t *testing.T, x identityTarget) {
	exec := func(t *testing.T, ns, pod, cmd string) string {
		t.Helper()
		out, err := cluster.ExecIn(ctx, x.tenantCfg, x.tenant, ns, pod, []string{"/bin/busybox", "sh", "-c", cmd})
		if err != nil {
			t.Fatalf("exec %q in %s/%s: %v", cmd, ns, pod, err)
		}
		return out
	}
	hb, _ := json.Marshal(bootproto.Heartbeat{MAC: x.node1.MAC, BootID: "00000000-0000-0000-0000-000000000000",
		RebootRequired: &bootproto.RebootSignal{Reason: "RebootRequiredFile", Message: "from a pod"}})

	t.Run("an ordinary pod reads the kernel command line but cannot reach kubefarm-pxe", func(t *testing.T) {
		cmdline := exec(t, "default", "client", "cat /proc/cmdline")
		if !strings.Contains(cmdline, "kubefarm.server=http://"+x.server) || !strings.Contains(cmdline, "BOOTIF=") {
			t.Fatalf("/proc/cmdline in the pod: %q, want kubefarm.server and BOOTIF (what the pod knows)", cmdline)
		}
		// The server answers the same requests from outside the tenant's
		// pods: what follows is the pod guard, not a server that is down.
		if code := httpStatus(t, "", "http://"+x.server+"/boot/"+x.node1.MAC+".ipxe"); code != 200 {
			t.Fatalf("kubefarm-pxe answers the script with HTTP %d from the host, want 200", code)
		}
		for _, r := range []struct{ what, method, path, body string }{
			{"the iPXE script", "GET", "/boot/" + x.node1.MAC + ".ipxe", ""},
			{"the boot secret", "GET", "/secret/" + x.node1.MAC, ""},
			{"the node configuration", "GET", "/config/" + x.node1.MAC, ""},
			{"a heartbeat asking for a reboot", "POST", "/heartbeat", string(hb)},
		} {
			out := exec(t, "default", "client", rawHTTP(x.server, r.method, r.path, "", r.body))
			if strings.Contains(out, "HTTP/") {
				t.Errorf("%s %s from the pod got an answer: %q; the node must drop it", r.method, r.path, lastLine(out))
			} else {
				t.Logf("%s (%s %s) from an ordinary pod: no answer, dropped by the node", r.what, r.method, r.path)
			}
		}
	})

	// Root on node 1, as `kubectl debug node/` gives a tenant admin: a
	// privileged pod in the host's network namespace with the host's root
	// file system mounted.
	const debugNS = "node-debug"
	t.Run("root on node 1 gets neither node 2's configuration nor another node's certificate", func(t *testing.T) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: debugNS,
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
		if _, err := x.tenant.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		priv := true
		root := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "root-on-" + x.node1.Name, Namespace: debugNS},
			Spec: corev1.PodSpec{NodeName: x.node1.Name, HostNetwork: true, HostPID: true,
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
				Containers: []corev1.Container{{Name: "debugger", Image: cluster.BusyboxImage,
					Command:         []string{"/bin/busybox", "sleep", "3600"},
					SecurityContext: &corev1.SecurityContext{Privileged: &priv},
					VolumeMounts:    []corev1.VolumeMount{{Name: "host", MountPath: "/host"}}}},
				Volumes: []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{
					HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}},
			},
		}
		pods := x.tenant.CoreV1().Pods(debugNS)
		if _, err := pods.Create(ctx, root, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = x.tenant.CoreV1().Namespaces().Delete(context.Background(), debugNS, metav1.DeleteOptions{})
		})
		if err := pollErr(ctx, 5*time.Minute, func(ctx context.Context) (bool, error) {
			p, err := pods.Get(ctx, root.Name, metav1.GetOptions{})
			return err == nil && podReady(p), nil
		}); err != nil {
			t.Fatalf("the root pod never ran on %s: %v", x.node1.Name, err)
		}
		// Not part of the threat model: while root is on node 1 anyway, the
		// record of where the node's CPU went since it booted (the TCG
		// machine's minutes are its CPU's), for the e2e's time.
		if out, err := cluster.ExecIn(ctx, x.tenantCfg, x.tenant, debugNS, root.Name, []string{"/bin/busybox", "sh", "-c", guestCPUScript}); err != nil {
			t.Logf("node 1's CPU by command: %v", err)
		} else {
			t.Logf("node 1's CPU by command since it booted (with reaped children):\n  %s", strings.ReplaceAll(strings.TrimSpace(out), "\n", "\n  "))
		}
		// Root reads node 1's own secret: it is node 1's to use.
		secret := strings.TrimSpace(exec(t, debugNS, root.Name, "cat /host/run/kubefarm/boot-secret"))
		if len(secret) != 64 {
			t.Fatalf("node 1's boot secret has %d characters, want 64", len(secret))
		}
		for _, r := range []struct{ what, path, auth string }{
			{"node 2's configuration", "/config/" + x.node2.MAC, ""},
			{"node 2's configuration with node 1's secret", "/config/" + x.node2.MAC, secret},
			{"node 1's configuration again, with its secret", "/config/" + x.node1.MAC, secret},
			{"a new secret for node 1", "/secret/" + x.node1.MAC, ""},
			{"a secret for node 2", "/secret/" + x.node2.MAC, ""},
		} {
			out := exec(t, debugNS, root.Name, rawHTTP(x.server, "GET", r.path, r.auth, ""))
			if !strings.HasPrefix(out, "HTTP/1.0 403") && !strings.HasPrefix(out, "HTTP/1.1 403") {
				t.Errorf("%s from root on node 1: %q, want 403", r.what, firstLine(out))
			}
		}

		// Node 1's own client certificate, the strongest credential root
		// there holds, asking for a certificate in another node's name or
		// in a name that is no Machine: kubefarm-manager denies both.
		// kubelet-client-current.pem is a symlink with an absolute target,
		// which must be read under /host too.
		pem := exec(t, debugNS, root.Name, "f=/host/var/lib/kubelet/pki/kubelet-client-current.pem; "+
			"t=$(readlink $f); case \"$t\" in /*) f=/host$t ;; esac; cat $f")
		asNode1 := rest.AnonymousClientConfig(x.tenantCfg)
		asNode1.CertData, asNode1.KeyData = []byte(pem), []byte(pem)
		node1, err := kubernetes.NewForConfig(asNode1)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{x.node2.Name, "no-such-machine"} {
			csr := clientCSR(t, "system:node:"+name)
			created, err := node1.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
			if err != nil {
				// The tenant's API server refuses a node's CSR for another
				// name itself (its node authorizer); any other error is not
				// that refusal.
				if !apierrors.IsForbidden(err) {
					t.Fatalf("node 1 asking for %s: %v, want Forbidden or a CSR the manager denies", name, err)
				}
				t.Logf("node 1 may not even ask for %s: %v", name, err)
				continue
			}
			var got *certificatesv1.CertificateSigningRequest
			if err := pollErr(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
				got, err = x.tenant.CertificatesV1().CertificateSigningRequests().Get(ctx, created.Name, metav1.GetOptions{})
				return err == nil && csrDecided(got), nil
			}); err != nil {
				t.Fatalf("the CSR for %s from node 1 was never decided: %v", name, err)
			}
			if len(got.Status.Certificate) != 0 || !csrDenied(got) {
				t.Errorf("the CSR for %s from node 1: conditions %+v, certificate issued: %v; want Denied", name, got.Status.Conditions, len(got.Status.Certificate) != 0)
			} else {
				t.Logf("node 1 asking for system:node:%s: Denied (%s)", name, deniedReason(got))
			}
		}
	})
}

// guestCPUScript prints a node's uptime, its CPUs' busy and idle time, and
// the CPU seconds (user and system, with reaped children's) of its
// processes grouped by command, the most first, from a pod in the host's
// PID namespace with busybox alone. A command is between the first "(" and
// the last ")" of /proc/<pid>/stat; utime is the 12th field after it.
const guestCPUScript = `B=/bin/busybox; cd /proc || exit 1
echo "uptime $($B cut -d' ' -f1 uptime) s; $($B head -n 1 stat)"
$B cat [0-9]*/stat 2>/dev/null | $B awk '{ c = $0; sub(/^[^(]*\(/, "", c); sub(/\)[^)]*$/, "", c)
  s = $0; sub(/^.*\) /, "", s); split(s, f, " "); t[c] += f[12] + f[13] + f[14] + f[15] }
  END { for (k in t) printf "%8.1f s  %s\n", t[k] / 100, k }' | $B sort -rn | $B head -n 25`

// clientCSR is a kubelet client certificate request for user cn in group
// system:nodes, as a kubelet makes it.
func clientCSR(t *testing.T, cn string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-identity-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
}

func csrDecided(c *certificatesv1.CertificateSigningRequest) bool {
	for _, cond := range c.Status.Conditions {
		if cond.Type == certificatesv1.CertificateApproved || cond.Type == certificatesv1.CertificateDenied || cond.Type == certificatesv1.CertificateFailed {
			return true
		}
	}
	return false
}

func csrDenied(c *certificatesv1.CertificateSigningRequest) bool {
	for _, cond := range c.Status.Conditions {
		if cond.Type == certificatesv1.CertificateApproved {
			return false
		}
	}
	return deniedReason(c) != ""
}

func deniedReason(c *certificatesv1.CertificateSigningRequest) string {
	for _, cond := range c.Status.Conditions {
		if cond.Type == certificatesv1.CertificateDenied {
			return cond.Reason + ": " + cond.Message
		}
	}
	return ""
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

package bootchain

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/testing/netnstest"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// artifacts are the files of the test's BootImages for one architecture:
// Debian's kernel, the initrd the test builds around it, and a root file
// system that is never mounted.
type artifacts struct {
	kernel, initrd, rootfs []byte
}

// prepareArtifacts fetches arch's kernel with modules (cached under
// _build/bootchain-cache) and builds the initrd with arch's busybox.
func prepareArtifacts(ctx context.Context, t *testing.T, arch string, modules []string) *artifacts {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(root, "_build", "bootchain-cache")
	pkg, err := KernelPackage(ctx, cache, arch)
	if err != nil {
		t.Fatal(err)
	}
	k, err := FetchKernel(ctx, cache, arch, pkg, modules)
	if err != nil {
		t.Fatal(err)
	}
	kernel, err := os.ReadFile(k.Vmlinuz)
	if err != nil {
		t.Fatal(err)
	}
	busybox, err := FetchBusybox(ctx, cache, arch)
	if err != nil {
		t.Fatal(err)
	}
	var initrd bytes.Buffer
	if err := BuildInitrd(&initrd, busybox, k.Modules); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s kernel %s (%s, %d bytes), initrd %d bytes with %d modules", arch, k.Package, k.Release, len(kernel), initrd.Len(), len(k.Modules))
	// The initrd never mounts a root file system, but a BootImage has one
	// and kubefarm-pxe caches it before serving the script.
	rootfs := []byte("kubefarm bootchain test: a root file system the initrd does not mount\n")
	return &artifacts{kernel: kernel, initrd: initrd.Bytes(), rootfs: rootfs}
}

// chain is the running server side: API server, kubefarm-pxe in the
// namespace, the boot images.
type chain struct {
	ns        string
	env       *testenv.Env
	namespace string
	// images are the BootImage each machine boots, by the machine's name.
	images     map[string]*bootImage
	origin     string // the artifact origin's URL
	binary     string // kubefarm-pxe
	kubeconfig string // kubefarm-pxe's, for the API server's forwarder
	http       *http.Client
	serverLog  *netnstest.LockedBuffer
}

// bootImage is a BootImage of the test and its artifacts' sizes.
type bootImage struct {
	*kubefarmv1.BootImage
	kernelLen, initrdLen int
}

// newChain starts the server side up to kubefarm-pxe (startPXE): builds
// the binary, makes the network namespace and its bridge, starts the API
// server, the artifact origin serving arts' files and the API server's
// forwarder into the namespace, and creates the test's namespace.
func newChain(ctx context.Context, t *testing.T, start time.Time, arts ...*artifacts) *chain {
	t.Helper()
	// The binary first: building is the heaviest step, better before the
	// API server starts competing for the two cores.
	binary := netnstest.BuildPXE(ctx, t)
	t.Logf("prepared kernel, initrd and binary in %s", time.Since(start).Round(time.Millisecond))

	ns := netnstest.New(t, "kfboot")
	netnstest.Bridge(t, ns, bridge, serverIP+"/24")
	env := testenv.StartT(t, testenv.Options{})
	c := &chain{ns: ns, env: env, binary: binary, images: map[string]*bootImage{}, http: netnstest.HTTPClient(ns)}

	// The artifact origin, listening inside the namespace where
	// kubefarm-pxe can reach it: on 127.0.0.2, which --fetch-allowed-cidrs
	// opens (127.0.0.1 is where it reaches the API server, which artifact
	// fetches never connect to).
	blobs := map[string][]byte{}
	for _, a := range arts {
		for _, b := range [][]byte{a.kernel, a.initrd, a.rootfs} {
			blobs["/"+sha(b)] = b
		}
	}
	originLn := netnstest.Listen(t, ns, "127.0.0.2:0")
	netnstest.ServeBlobs(t, originLn, blobs)
	c.origin = "http://" + originLn.Addr().String()

	// The API server listens on the host's loopback; kubefarm-pxe reaches
	// it through a forwarder listening on the namespace's.
	apiURL, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	apiLn := netnstest.Listen(t, ns, "127.0.0.1:0")
	netnstest.Forward(t, apiLn, apiURL.Host)
	c.kubeconfig = netnstest.APIKubeconfig(t, env, "kubefarm-pxe", apiLn.Addr().String())

	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bootchain-"}}
	if err := env.Client.Create(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	c.namespace = nsObj.Name
	return c
}

// createImage creates the BootImage name of a's files, said to be for
// arch ("" is the API's default, amd64).
func (c *chain) createImage(ctx context.Context, t *testing.T, name, arch string, a *artifacts) *bootImage {
	t.Helper()
	art := func(b []byte) kubefarmv1.Artifact {
		return kubefarmv1.Artifact{Digest: sha(b), URL: c.origin + "/" + sha(b)}
	}
	img := &kubefarmv1.BootImage{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: kubefarmv1.BootImageSpec{
			KubeletVersion: "v1.34.0", Architecture: arch,
			Kernel: art(a.kernel), Initrd: art(a.initrd), Rootfs: art(a.rootfs),
		},
	}
	if err := c.env.Client.Create(ctx, img); err != nil {
		t.Fatalf("creating BootImage %s: %v", name, err)
	}
	return &bootImage{BootImage: img, kernelLen: len(a.kernel), initrdLen: len(a.initrd)}
}

// createPool creates the NodePool name of image img with kernelArgs and
// the machines vms, and their Machines.
//
// No tags, no initrd= of the test's own: Debian's iPXE
// (1.0.0+git-20190125), and the arm64 one built from its source, predate
// LoadFile2 initrd support, so a UEFI machine finds its initrd only
// through the initrd= that kubefarm-pxe's script puts on the command line.
func (c *chain) createPool(ctx context.Context, t *testing.T, name string, img *bootImage, kernelArgs []string, vms ...vm) {
	t.Helper()
	pool := &kubefarmv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: name},
		Spec: kubefarmv1.NodePoolSpec{
			Cluster: "c1", BootImage: img.Name,
			Network:    kubefarmv1.BootNetwork{Subnet: subnet, Gateway: serverIP},
			KernelArgs: kernelArgs,
		},
	}
	for _, v := range vms {
		pool.Spec.Machines = append(pool.Spec.Machines, kubefarmv1.MachineEntry{Name: v.name, MACs: []string{v.mac}, IP: v.ip})
	}
	if err := c.env.Client.Create(ctx, pool); err != nil {
		t.Fatalf("creating NodePool %s: %v", name, err)
	}
	for _, v := range vms {
		m := &kubefarmv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: v.name},
			Spec: kubefarmv1.MachineSpec{
				Pool: pool.Name, Cluster: "c1", Hostname: v.name, MACs: []string{v.mac}, IP: v.ip, DesiredImage: img.Name,
			},
		}
		if err := c.env.Client.Create(ctx, m); err != nil {
			t.Fatalf("creating Machine %s: %v", v.name, err)
		}
		c.images[v.name] = img
	}
}

// startPXE runs kubefarm-pxe in the namespace as production runs it,
// serving the iPXE binaries in dir over TFTP (and HTTP), and waits until
// its cache has synced and it serves each of vms its script. HEAD caches
// the artifacts (serving a script opens nothing).
func (c *chain) startPXE(ctx context.Context, t *testing.T, dir string, vms ...vm) {
	t.Helper()
	pxe := netnstest.StartPXE(t, "bootchain", c.ns, c.binary,
		"--kubeconfig", c.kubeconfig,
		"--server-ip", serverIP,
		"--interface", bridge,
		"--http-addr", net.JoinHostPort(serverIP, strconv.Itoa(httpPort)),
		"--metrics-addr", net.JoinHostPort(serverIP, strconv.Itoa(metricsPort)),
		"--tftp-addr", net.JoinHostPort(serverIP, "69"),
		"--ipxe-dir", dir,
		"--cache-dir", t.TempDir(),
		"--fetch-allowed-cidrs", "127.0.0.2/32",
		"--zap-log-level", "debug",
	)
	c.serverLog = pxe.Log
	base := fmt.Sprintf("http://%s:%d", serverIP, httpPort)
	urls := []string{fmt.Sprintf("http://%s:%d/healthz", serverIP, metricsPort)}
	for _, v := range vms {
		urls = append(urls, base+"/boot/"+v.mac+".ipxe")
	}
	pxe.WaitHTTP(ctx, t, c.http, 2*time.Minute, urls...)
}

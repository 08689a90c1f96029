// Command nodeimage is the Go half of images/node/build.sh:
//
//	nodeimage initrd -dir TREE -mtime EPOCH -o FILE     deterministic gzip newc initramfs of TREE
//	nodeimage pause-image -binary B -mtime EPOCH -o F   docker-archive of the pause image
//	nodeimage manifest -out DIR -root ROOT [flags]      write DIR/manifest.json
//	nodeimage chain -conflist F -o F [-types T,..] ENTRY.json...
//	                                                    append plugin entries to a conflist's chain (ChainPlugins)
//	nodeimage cni-record -root ROOT -o FILE             the CNI chain record the agent checks against
//	nodeimage verify DIR                                check DIR's artifacts against its manifest
//	nodeimage push -repo REPO [-insecure] DIR           push DIR as one OCI artifact, print its BootImage
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"

	nodeimage "github.com/kubefarm/kubefarm/images/node"
	"github.com/kubefarm/kubefarm/images/node/cni"
)

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: nodeimage initrd|pause-image|chain|cni-record|manifest|verify|push (see images/node/README.md)"))
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "initrd":
		err = initrd(args)
	case "pause-image":
		err = pauseImage(args)
	case "manifest":
		err = manifest(args)
	case "chain":
		err = chain(args)
	case "cni-record":
		err = cniRecord(args)
	case "push":
		err = push(args)
	case "verify":
		if len(args) != 1 {
			err = fmt.Errorf("usage: nodeimage verify DIR")
			break
		}
		var m *nodeimage.Manifest
		if m, err = nodeimage.Verify(args[0]); err == nil {
			for _, a := range nodeimage.Artifacts {
				fmt.Printf("%-16s sha256:%s %d\n", a, m.Artifacts[a].SHA256, m.Artifacts[a].Size)
			}
		}
	default:
		err = fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "nodeimage:", err)
	os.Exit(1)
}

// writeFile writes b to path through a temporary file in the same folder.
func writeFile(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func initrd(args []string) error {
	fs := flag.NewFlagSet("initrd", flag.ExitOnError)
	dir := fs.String("dir", "", "tree to pack")
	mtime := fs.Int64("mtime", 0, "mtime of every entry (SOURCE_DATE_EPOCH)")
	out := fs.String("o", "", "output file")
	fs.Parse(args)
	if *dir == "" || *out == "" {
		return fmt.Errorf("initrd: -dir and -o are required")
	}
	var buf bytes.Buffer
	if err := nodeimage.WriteInitramfs(&buf, *dir, *mtime); err != nil {
		return err
	}
	return writeFile(*out, buf.Bytes())
}

func pauseImage(args []string) error {
	fs := flag.NewFlagSet("pause-image", flag.ExitOnError)
	bin := fs.String("binary", "", "static pause binary")
	ref := fs.String("ref", nodeimage.PauseImageRef, "image name")
	arch := fs.String("arch", "amd64", "the binary's GOARCH, the image's architecture")
	mtime := fs.Int64("mtime", 0, "time of the image and its files (SOURCE_DATE_EPOCH)")
	out := fs.String("o", "", "output file")
	fs.Parse(args)
	if *bin == "" || *out == "" {
		return fmt.Errorf("pause-image: -binary and -o are required")
	}
	var buf bytes.Buffer
	if err := nodeimage.WritePauseImage(&buf, *ref, *bin, *arch, *mtime); err != nil {
		return err
	}
	return writeFile(*out, buf.Bytes())
}

func manifest(args []string) error {
	fs := flag.NewFlagSet("manifest", flag.ExitOnError)
	out := fs.String("out", "", "folder holding vmlinuz, initrd and rootfs.squashfs")
	root := fs.String("root", "", "the root file system tree the squashfs was made of")
	m := nodeimage.Manifest{SchemaVersion: 1}
	fs.StringVar(&m.Architecture, "arch", "amd64", "the machines' Debian architecture (amd64, arm64)")
	fs.StringVar(&m.Key, "key", "", "cache key")
	fs.StringVar(&m.Suite, "suite", "", "Debian suite")
	fs.StringVar(&m.Mirror, "mirror", "", "Debian mirror")
	fs.Int64Var(&m.SourceDateEpoch, "source-date-epoch", 0, "SOURCE_DATE_EPOCH")
	fs.StringVar(&m.Kernel.Package, "kernel-package", "", "kernel package name")
	fs.StringVar(&m.Kernel.Version, "kernel-version", "", "kernel package version")
	fs.StringVar(&m.Kernel.Release, "kernel-release", "", "uname -r")
	kdeb := fs.String("kernel-deb", "", "the kernel .deb")
	fs.StringVar(&m.Kubelet.Version, "kubelet-version", "", "kubelet version")
	fs.StringVar(&m.Flannel.Version, "flannel-version", "", "flannel versions")
	fs.StringVar(&m.Containerd, "containerd-version", "", "containerd's version (containerd --version)")
	fs.StringVar(&m.Runc, "runc-version", "", "runc's version (runc --version)")
	always := fs.String("modules", "", "modules loaded at every boot, comma separated")
	ipvs := fs.String("modules-ipvs", "", "modules of kube-proxy's IPVS mode, comma separated")
	fs.Parse(args)
	if *out == "" || *root == "" || *kdeb == "" {
		return fmt.Errorf("manifest: -out, -root and -kernel-deb are required")
	}
	var err error
	if m.Kernel.DebSHA256, _, err = cni.FileSHA256(*kdeb); err != nil {
		return err
	}
	if m.Kubelet.SHA256, _, err = cni.FileSHA256(filepath.Join(*root, "usr/bin/kubelet")); err != nil {
		return err
	}
	if m.Flannel.SHA256, _, err = cni.FileSHA256(filepath.Join(*root, "usr/bin/flanneld")); err != nil {
		return err
	}
	m.Agent = "none"
	if s, _, err := cni.FileSHA256(filepath.Join(*root, "usr/bin/kubefarm-agent")); err == nil {
		m.Agent = "sha256:" + s
	} else if !os.IsNotExist(err) {
		return err
	}
	if m.CNI, err = cni.FromRoot(*root); err != nil {
		return err
	}
	if m.Packages, err = nodeimage.DpkgPackages(*root); err != nil {
		return err
	}
	// Built from their Go modules, not Debian's: the versions they print.
	if m.Containerd == "" || m.Runc == "" {
		return fmt.Errorf("manifest: -containerd-version and -runc-version are required")
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc"} {
		if _, err := os.Stat(filepath.Join(*root, "usr/bin", b)); err != nil {
			return fmt.Errorf("manifest: %s is not installed in %s: %w", b, *root, err)
		}
	}
	for _, p := range []string{"containerd", "runc"} {
		if v := nodeimage.PackageVersion(m.Packages, p); v != "" {
			return fmt.Errorf("manifest: Debian's %s %s is installed in %s besides the one built from its module", p, v, *root)
		}
	}
	m.Modules = map[string][]string{"always": split(*always), "ipvs": split(*ipvs)}
	m.Artifacts = map[string]nodeimage.File{}
	for _, a := range nodeimage.Artifacts {
		s, n, err := cni.FileSHA256(filepath.Join(*out, a))
		if err != nil {
			return err
		}
		m.Artifacts[a] = nodeimage.File{SHA256: s, Size: n}
	}
	return nodeimage.WriteManifest(*out, &m)
}

func split(s string) []string {
	out := []string{}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// chain appends plugin entries (one JSON object per file) to a conflist's
// chain with cni.ChainPlugins; build.sh runs it for CNI_CHAIN_DIR.
// -types, when given, is the entries' types in order (build.sh passes the
// folder names, so each entry's type must be its folder's name).
func chain(args []string) error {
	fs := flag.NewFlagSet("chain", flag.ExitOnError)
	conflist := fs.String("conflist", "", "the conflist to chain onto")
	out := fs.String("o", "", "file to write (may be the -conflist file)")
	types := fs.String("types", "", "the types the entries must have, in order, comma separated (optional)")
	fs.Parse(args)
	if *conflist == "" || *out == "" || fs.NArg() == 0 {
		return errors.New("usage: nodeimage chain -conflist FILE -o FILE [-types T1,T2] ENTRY.json (one or more)")
	}
	conf, err := os.ReadFile(*conflist)
	if err != nil {
		return err
	}
	var entries [][]byte
	var got []string
	for _, f := range fs.Args() {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		t, err := cni.EntryType(b)
		if err != nil {
			return fmt.Errorf("chain: %s: %w", f, err)
		}
		entries = append(entries, b)
		got = append(got, t)
	}
	if *types != "" && strings.Join(got, ",") != *types {
		return fmt.Errorf("chain: the entries' types are %s, want %s (an entry's type is its folder's name)", strings.Join(got, ","), *types)
	}
	b, err := cni.ChainPlugins(conf, entries...)
	if err != nil {
		return fmt.Errorf("chain: %w", err)
	}
	return writeFile(*out, b)
}

// cniRecord writes what the agent checks the node's CNI chain against
// (agent/cnicheck.ReadExpected): the chain hashed from the root tree, in
// the manifest's shape. It is written into the root before mksquashfs, so
// the image carries the record of its own chain.
func cniRecord(args []string) error {
	fs := flag.NewFlagSet("cni-record", flag.ExitOnError)
	root := fs.String("root", "", "the root file system tree")
	out := fs.String("o", "", "file to write")
	fs.Parse(args)
	if *root == "" || *out == "" {
		return fmt.Errorf("cni-record: -root and -o are required")
	}
	c, err := cni.FromRoot(*root)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(map[string]any{"cni": c}, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(*out, append(b, '\n'))
}

// push uploads a built image as one OCI artifact and prints the BootImage
// that serves it (YAML), ready for kubectl apply.
func push(args []string) error {
	fs := flag.NewFlagSet("push", flag.ExitOnError)
	repo := fs.String("repo", "", "OCI repository, such as registry.example.com/kubefarm/node")
	tag := fs.String("tag", "", "tag the manifest too (optional)")
	objName := fs.String("name", "", "the BootImage's name (default: node-<first 12 hex digits of the rootfs digest>)")
	insecure := fs.Bool("insecure", false, "the registry speaks plain HTTP")
	fs.Parse(args)
	if *repo == "" || fs.NArg() != 1 {
		return fmt.Errorf("usage: nodeimage push -repo REPO [-tag TAG] [-name NAME] [-insecure] DIR")
	}
	a, err := nodeimage.NewOCIArtifact(fs.Arg(0))
	if err != nil {
		return err
	}
	var nameOpts []name.Option
	if *insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	ref, err := a.Push(context.Background(), *repo, *tag, nameOpts, remote.WithAuthFromKeychain(authn.DefaultKeychain))
	if err != nil {
		return err
	}
	if *objName == "" {
		*objName = "node-" + a.Manifest.Artifacts[nodeimage.Rootfs].SHA256[:12]
	}
	b, err := yaml.Marshal(a.BootImage(*objName, *repo))
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "pushed %s\n", ref)
	_, err = os.Stdout.Write(b)
	return err
}

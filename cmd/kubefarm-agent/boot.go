package main

// This file holds the boot steps run calls in order: read what the kernel
// and initrd say, configure from kubefarm-pxe, write the files, report.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubefarm/kubefarm/agent/cnicheck"
	"github.com/kubefarm/kubefarm/agent/noderegister"
	"github.com/kubefarm/kubefarm/agent/pxeclient"
	"github.com/kubefarm/kubefarm/agent/render"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
	"github.com/kubefarm/kubefarm/pxe/bootsecret"
	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

// boot is what the kernel and the initrd say of this boot.
type boot struct {
	params bootproto.Params
	bootID string
	iface  string // the boot interface
	mac    string // its MAC, the machine's name to kubefarm-pxe
}

// readBoot reads the kernel command line, the boot ID and the boot
// interface.
func readBoot(o Options) (boot, error) {
	cmdline, err := os.ReadFile(o.Cmdline)
	if err != nil {
		return boot{}, err
	}
	params, err := bootproto.Parse(string(cmdline))
	if err != nil {
		return boot{}, err
	}
	b, err := os.ReadFile(o.BootIDFile)
	if err != nil {
		return boot{}, err
	}
	bootID, err := bootproto.ParseBootID(string(b))
	if err != nil {
		return boot{}, err
	}
	iface, mac, err := bootInterface(o, params)
	if err != nil {
		return boot{}, err
	}
	return boot{params: params, bootID: bootID, iface: iface, mac: mac}, nil
}

// registration is the Node the kubelet registers, and where: known when
// this run fetched the configuration and the agent creates the Node.
type registration struct {
	node      *corev1.Node
	apiServer string
}

// create creates the kubelet's Node once its client certificate is
// there; failing that, the kubelet registers it itself.
func (r *registration) create(ctx context.Context, o Options, log logr.Logger) {
	in := func(p string) string { return filepath.Join(o.Root, p) }
	out, err := noderegister.Create(ctx, r.apiServer, in(render.CACert), in(o.KubeletClientCert), r.node, 200*time.Millisecond, o.RegisterTimeout)
	if err != nil {
		log.Info("the kubelet registers its Node itself", "node", r.node.Name, "reason", err.Error())
		return
	}
	log.Info("the kubelet's Node", "node", r.node.Name, "outcome", string(out))
}

// configure writes this boot's files from the configuration kubefarm-pxe
// serves, once per boot: a restarted agent finds the marker of this boot
// and keeps what the first run wrote. The registration is nil then.
func configure(ctx context.Context, o Options, d Deps, pxe *pxeclient.Client, b boot, log logr.Logger) (settings, *registration, error) {
	stateDir := filepath.Join(o.Root, o.StateDir)
	marker := filepath.Join(stateDir, "configured")
	if done, _ := os.ReadFile(marker); strings.TrimSpace(string(done)) == b.bootID {
		log.Info("files of this boot already written; not fetching the configuration again")
		var kept settings
		if err := readState(stateDir, settingsFile, b.bootID, &kept); err != nil {
			log.Error(err, "what this boot's configuration said beyond the files is lost; no reboot after a login")
		}
		return kept, nil, nil
	}
	fctx, cancel := context.WithTimeout(ctx, o.FetchTimeout)
	nc, err := pxe.FetchConfig(fctx, b.mac)
	cancel()
	if err != nil {
		return settings{}, nil, fmt.Errorf("fetching the node configuration: %w", err)
	}
	// Never the whole NodeConfig: it holds the join token.
	log.Info("fetched the node configuration", "machine", nc.Machine, "cluster", nc.Cluster, "hostname", nc.Hostname, "apiServer", nc.APIServer)
	if nc.ImageDigest != "" && nc.ImageDigest != b.params.Image {
		log.Info("kubefarm-pxe serves another image than this boot's", "served", nc.ImageDigest, "booted", b.params.Image)
	}
	reg, err := writeConfig(o, d, nc, b.iface, b.mac, log)
	if err != nil {
		return settings{}, nil, err
	}
	// Before the marker: a marker of this boot means both are there.
	kept := settings{BootID: b.bootID, RebootAfterLogin: nc.RebootAfterLogin, NetworkLinks: render.NetworkLinks(nc.Network)}
	if err := writeState(stateDir, settingsFile, kept); err != nil {
		return settings{}, nil, err
	}
	if err := os.WriteFile(marker, []byte(b.bootID+"\n"), 0o600); err != nil {
		return settings{}, nil, err
	}
	return kept, reg, nil
}

// writeConfig renders nc into the root's files and sets the host name; the
// registration is nil unless the agent creates the kubelet's Node.
func writeConfig(o Options, d Deps, nc nodeconfig.NodeConfig, iface, mac string, log logr.Logger) (*registration, error) {
	rin := render.Input{Config: nc, BootIface: iface, BootMAC: mac}
	if nc.RootPasswordHash != "" {
		var err error
		if rin.Shadow, err = os.ReadFile(filepath.Join(o.Root, render.Shadow)); err != nil {
			return nil, err
		}
	}
	res, err := render.Render(rin)
	if err != nil {
		return nil, err
	}
	var reg *registration
	if o.KubeletClientCert != "" {
		node, err := render.Node(nc)
		if err != nil {
			return nil, err
		}
		reg = &registration{node: node, apiServer: nc.APIServer}
	}
	if len(res.DroppedLabels) > 0 {
		log.Info("labels kubelet may not set on its own Node left to kubefarm-manager", "labels", res.DroppedLabels)
	}
	if err := writeFiles(o.Root, res.Files); err != nil {
		return nil, err
	}
	if err := d.SetHostname(nc.Hostname); err != nil {
		return nil, fmt.Errorf("setting the host name %q: %w", nc.Hostname, err)
	}
	return reg, nil
}

// report tells kubefarm-pxe what booted and whether the network works.
func report(ctx context.Context, o Options, pxe *pxeclient.Client, b boot, verdict cnicheck.Verdict) error {
	rep := bootproto.BootReport{MAC: b.mac, BootID: b.bootID, ImageDigest: b.params.Image,
		Network: &bootproto.NetworkVerdict{Verified: verdict.OK, Reason: clip(verdict.Reason, bootproto.MaxNetworkReason)}}
	rctx, cancel := context.WithTimeout(ctx, o.ReportTimeout)
	defer cancel()
	if err := pxe.Report(rctx, rep); err != nil {
		return fmt.Errorf("reporting the boot: %w", err)
	}
	return nil
}

// readBootSecret reads this boot's secret (package bootsecret), which the
// initrd left in a root-only file. It refuses a file others may read: the
// secret is what tells this node from its pods.
func readBootSecret(path string) (bootsecret.Secret, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("this boot's secret: %w (the initrd moves it there from the archive kubefarm-pxe served beside the node image's initrd)", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("this boot's secret %s has mode %v: others may read it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("this boot's secret: %w", err)
	}
	s, err := bootsecret.Parse(string(b))
	if err != nil {
		return "", fmt.Errorf("this boot's secret %s: %w", path, err)
	}
	return s, nil
}

// bootInterface names the interface the machine booted on and its MAC: the
// one the initrd got its lease on (so the address kubefarm-pxe checks
// /config against), whose MAC is BOOTIF's when iPXE passed it.
func bootInterface(o Options, p bootproto.Params) (iface, mac string, err error) {
	b, err := os.ReadFile(o.BootIfaceFile)
	if err != nil {
		return "", "", fmt.Errorf("the boot interface: %w", err)
	}
	if iface, err = bootproto.ParseBootIface(string(b)); err != nil {
		return "", "", err
	}
	if p.BootIF != "" {
		return iface, p.BootIF, nil
	}
	addr, err := os.ReadFile(filepath.Join(o.SysClassNet, iface, "address"))
	if err != nil {
		return "", "", fmt.Errorf("the MAC of boot interface %s: %w", iface, err)
	}
	mac, err = bootproto.NormalizeMAC(strings.TrimSpace(string(addr)))
	if err != nil {
		return "", "", fmt.Errorf("the MAC of boot interface %s: %w", iface, err)
	}
	return iface, mac, nil
}

// applyNetwork brings up the hostNetwork's links (bonds, VLANs) the files
// describe, before the kubelet starts. A failure is the boot's network
// verdict: the node joins, keeps its network taint, and its report (the
// Machine's NetworkVerified condition) and the console say why.
func applyNetwork(ctx context.Context, o Options, d Deps, links []string, log logr.Logger) cnicheck.Verdict {
	if len(links) == 0 {
		return cnicheck.Verdict{OK: true}
	}
	err := errors.New("this agent has no way to apply a host network")
	if d.ApplyNetwork != nil {
		err = d.ApplyNetwork(ctx, links, o.NetworkTimeout)
	}
	if err != nil {
		msg := fmt.Sprintf("host network: links %s did not come up: %v", strings.Join(links, ", "), err)
		log.Error(err, "the host network did not come up", "links", links)
		if d.Console != nil {
			d.Console("kubefarm-agent: " + msg)
		}
		return cnicheck.Verdict{Reason: clip(msg, 512)}
	}
	log.Info("host network up", "links", links)
	return cnicheck.Verdict{OK: true}
}

// waitNetwork waits for flanneld's subnet file. A failed wait is a verdict
// with its reason; success is OK without one (the chain check follows).
func waitNetwork(ctx context.Context, file string, timeout, poll time.Duration) cnicheck.Verdict {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		if fi, err := os.Stat(file); err == nil && fi.Size() > 0 {
			return cnicheck.Verdict{OK: true}
		}
		select {
		case <-ctx.Done():
			return cnicheck.Verdict{Reason: fmt.Sprintf("flanneld wrote no %s within %s", strings.TrimPrefix(file, "/"), timeout)}
		case <-t.C:
		}
	}
}

func checkChain(o Options) cnicheck.Verdict {
	want, err := cnicheck.ReadExpected(filepath.Join(o.Root, o.CNIRecord))
	if err != nil {
		return cnicheck.Verdict{Reason: err.Error()}
	}
	return cnicheck.Check(o.Root, cnicheck.Default, want)
}

// clip cuts s to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && (s[n]&0xc0) == 0x80 {
		n--
	}
	return s[:n]
}

// writeFiles writes files under root: each through a temporary file renamed
// into place, so kubelet never reads half a file, with its mode set
// whatever the umask.
func writeFiles(root string, files []render.File) error {
	for _, f := range files {
		p := filepath.Join(root, f.Path)
		dirMode := os.FileMode(0o755)
		if f.Mode&0o077 == 0 && strings.HasPrefix(f.Path, "/root/") {
			dirMode = 0o700 // /root/.ssh
		}
		if err := os.MkdirAll(filepath.Dir(p), dirMode); err != nil {
			return fmt.Errorf("writing %s: %w", f.Path, err)
		}
		tmp := p + ".kubefarm-agent.tmp"
		_ = os.Remove(tmp)
		if f.Symlink != "" {
			if err := os.Symlink(f.Symlink, tmp); err != nil {
				return fmt.Errorf("writing %s: %w", f.Path, err)
			}
		} else {
			if err := os.WriteFile(tmp, f.Data, f.Mode); err != nil {
				return fmt.Errorf("writing %s: %w", f.Path, err)
			}
			if err := os.Chmod(tmp, f.Mode); err != nil {
				return fmt.Errorf("writing %s: %w", f.Path, err)
			}
		}
		if err := os.Rename(tmp, p); err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("writing %s: %w", f.Path, err)
		}
	}
	return nil
}

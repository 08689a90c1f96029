package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// The cluster's DNS: a minimal, in-process stand-in for CoreDNS's kubernetes
// plugin, run on the host as the `e2e-cluster dns` subcommand (there is no
// CoreDNS binary among the pinned ones). It answers A queries for
//
//	<service>.<namespace>.svc.<domain>            the ClusterIP, or the
//	                                              endpoints of a headless one
//	<hostname>.<service>.<namespace>.svc.<domain> one endpoint of a headless
//	                                              Service (StatefulSet pods)
//
// from informers on Services and EndpointSlices, NOERROR with no answer for
// other types of a known name, and NXDOMAIN for everything else (pods of the
// e2e cluster resolve nothing outside it). The kubelet's clusterDNS is the
// node's address, where this listens, over UDP and TCP.

const dnsTTL = 5

// dnsAddr is where the cluster DNS listens: the node's address, port 53.
func (c *Cluster) dnsAddr() string { return net.JoinHostPort(c.NodeIP.String(), "53") }

func (c *Cluster) startDNS(ctx context.Context) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := c.start("dns", []string{self, "dns", "--addr", c.dnsAddr(), "--kubeconfig", c.AdminKubeconfig(), "--domain", clusterDomain}); err != nil {
		return err
	}
	return c.waitFor(ctx, "dns", time.Minute, func(context.Context) (bool, error) {
		// kubernetes.default is always there once the informers synced.
		ips, err := lookupA(c.dnsAddr(), "kubernetes.default.svc."+clusterDomain+".")
		return err == nil && len(ips) == 1, nil
	})
}

const clusterDomain = "cluster.local"

// ServeDNS answers the cluster's DNS queries on addr until ctx ends.
func ServeDNS(ctx context.Context, addr, kubeconfigPath, domain string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigPath)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(cs, 10*time.Minute)
	svcs := factory.Core().V1().Services()
	slices := factory.Discovery().V1().EndpointSlices()
	svcInf, sliceInf := svcs.Informer(), slices.Informer()
	if err := sliceInf.AddIndexers(cache.Indexers{"service": func(obj any) ([]string, error) {
		s := obj.(*discoveryv1.EndpointSlice)
		return []string{s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]}, nil
	}}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), svcInf.HasSynced, sliceInf.HasSynced) {
		return errors.New("informers never synced")
	}
	r := &dnsResolver{domain: strings.TrimSuffix(domain, ".") + ".", services: func(ns, name string) (*corev1.Service, bool) {
		s, err := svcs.Lister().Services(ns).Get(name)
		return s, err == nil
	}, endpoints: func(ns, name string) []*discoveryv1.EndpointSlice {
		objs, _ := sliceInf.GetIndexer().ByIndex("service", ns+"/"+name)
		out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
		for _, o := range objs {
			out = append(out, o.(*discoveryv1.EndpointSlice))
		}
		return out
	}}
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		pc.Close()
		return err
	}
	go func() { <-ctx.Done(); pc.Close(); ln.Close() }()
	fmt.Printf("cluster DNS serving %s on %s\n", r.domain, addr)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go serveTCP(conn, r)
		}
	}()
	buf := make([]byte, 4096)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			break
		}
		if resp := r.answer(buf[:n]); resp != nil {
			_, _ = pc.WriteTo(resp, from)
		}
	}
	wg.Wait()
	return ctx.Err()
}

func serveTCP(conn net.Conn, r *dnsResolver) {
	defer conn.Close()
	for {
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		var l [2]byte
		if _, err := io.ReadFull(conn, l[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(conn, msg); err != nil {
			return
		}
		resp := r.answer(msg)
		if resp == nil {
			return
		}
		out := binary.BigEndian.AppendUint16(nil, uint16(len(resp)))
		if _, err := conn.Write(append(out, resp...)); err != nil {
			return
		}
	}
}

type dnsResolver struct {
	domain    string // with the trailing dot
	services  func(ns, name string) (*corev1.Service, bool)
	endpoints func(ns, name string) []*discoveryv1.EndpointSlice
}

// lookup returns the IPv4 addresses of a name and whether the name exists.
func (r *dnsResolver) lookup(name string) ([]netip.Addr, bool) {
	name = strings.ToLower(name)
	if !strings.HasSuffix(name, ".svc."+r.domain) {
		return nil, false
	}
	labels := strings.Split(strings.TrimSuffix(name, ".svc."+r.domain), ".")
	var host, svcName, ns string
	switch len(labels) {
	case 2:
		svcName, ns = labels[0], labels[1]
	case 3:
		host, svcName, ns = labels[0], labels[1], labels[2]
	default:
		return nil, false
	}
	svc, ok := r.services(ns, svcName)
	if !ok {
		return nil, false
	}
	headless := svc.Spec.ClusterIP == corev1.ClusterIPNone
	if host == "" && !headless {
		a, err := netip.ParseAddr(svc.Spec.ClusterIP)
		if err != nil || !a.Is4() {
			return nil, true
		}
		return []netip.Addr{a}, true
	}
	if !headless {
		return nil, false
	}
	var out []netip.Addr
	found := host == ""
	for _, s := range r.endpoints(ns, svcName) {
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		for _, ep := range s.Endpoints {
			ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready || svc.Spec.PublishNotReadyAddresses
			if host != "" {
				if ep.Hostname == nil || *ep.Hostname != host {
					continue
				}
				found = true
			} else if !ready {
				continue
			}
			for _, a := range ep.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil {
					out = append(out, ip)
				}
			}
		}
	}
	return out, found
}

// answer builds the response to one query message, nil when it cannot be
// parsed at all.
func (r *dnsResolver) answer(query []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil
	}
	q, err := p.Question()
	hdr := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, OpCode: h.OpCode}
	if err != nil || h.OpCode != 0 {
		hdr.RCode = dnsmessage.RCodeFormatError
		b := dnsmessage.NewBuilder(nil, hdr)
		out, _ := b.Finish()
		return out
	}
	addrs, exists := r.lookup(q.Name.String())
	if !exists {
		hdr.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, hdr)
	b.EnableCompression()
	_ = b.StartQuestions()
	_ = b.Question(q)
	_ = b.StartAnswers()
	if q.Type == dnsmessage.TypeA && q.Class == dnsmessage.ClassINET {
		for _, a := range addrs {
			_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: dnsTTL},
				dnsmessage.AResource{A: a.As4()})
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// lookupA asks a DNS server for the A records of a fully qualified name.
func lookupA(server, name string) ([]netip.Addr, error) {
	n, err := dnsmessage.NewName(name)
	if err != nil {
		return nil, err
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 1, RecursionDesired: true})
	_ = b.StartQuestions()
	_ = b.Question(dnsmessage.Question{Name: n, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	msg, err := b.Finish()
	if err != nil {
		return nil, err
	}
	conn, err := net.DialTimeout("udp", server, time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write(msg); err != nil {
		return nil, err
	}
	buf := make([]byte, 1500)
	l, err := conn.Read(buf)
	if err != nil {
		return nil, err
	}
	var p dnsmessage.Parser
	h, err := p.Start(buf[:l])
	if err != nil {
		return nil, err
	}
	if h.RCode != dnsmessage.RCodeSuccess {
		return nil, fmt.Errorf("%s: %v", name, h.RCode)
	}
	_ = p.SkipAllQuestions()
	var out []netip.Addr
	for {
		rh, err := p.AnswerHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if rh.Type != dnsmessage.TypeA {
			_ = p.SkipAnswer()
			continue
		}
		a, err := p.AResource()
		if err != nil {
			return nil, err
		}
		out = append(out, netip.AddrFrom4(a.A))
	}
}

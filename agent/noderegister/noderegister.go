// Package noderegister creates the kubelet's Node with the kubelet's own
// client certificate the moment the kubelet has one.
//
// Why: the kubelet sets up its CSINode as soon as it has a credential and
// retries that 0.03, 0.27 and 2.2 s later, then not before 17.6 s; until it
// succeeds the Node is NotReady. The CSINode needs the Node, which the
// kubelet registers only after more of its start-up than that on a slow
// machine (qemu TCG here, and a loaded server anywhere). Created here, the
// Node is there for one of the early retries. The Node is the one the
// kubelet would register (render.Node); a kubelet that finds it adds its
// default labels and keeps the rest. NodeRestriction lets a node create
// only its own Node, with the labels a kubelet may set.
package noderegister

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Outcome is what became of the Node.
type Outcome string

const (
	// Created: this call created the Node.
	Created Outcome = "created"
	// Existed: the kubelet (or an earlier run) was first.
	Existed Outcome = "already registered"
)

// Create waits (polling every poll, at most timeout) for the kubelet's
// client certificate certFile (one PEM with certificate and key), then
// POSTs node to apiServer's /api/v1/nodes with it, trusting the CA in
// caFile. A refusal other than AlreadyExists is retried until timeout: the
// API server may not trust a certificate issued a moment ago yet.
func Create(ctx context.Context, apiServer, caFile, certFile string, node *corev1.Node, poll, timeout time.Duration) (Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, err := json.Marshal(node)
	if err != nil {
		return "", err
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return "", fmt.Errorf("the cluster CA %s: %w", caFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return "", fmt.Errorf("the cluster CA %s holds no PEM certificate", caFile)
	}
	url := strings.TrimSuffix(apiServer, "/") + "/api/v1/nodes"
	tick := time.NewTicker(poll)
	defer tick.Stop()
	var last error
	for {
		out, err := post(ctx, url, pool, certFile, body)
		if err == nil {
			return out, nil
		}
		// The deadline cutting a request short says less than the
		// answer before it.
		if last == nil || ctx.Err() == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("node %s not created within %s: %w", node.Name, timeout, last)
		case <-tick.C:
		}
	}
}

// errNoCert: the kubelet has no client certificate yet.
var errNoCert = errors.New("the kubelet has no client certificate yet")

func post(ctx context.Context, url string, pool *x509.CertPool, certFile string, body []byte) (Outcome, error) {
	cert, err := tls.LoadX509KeyPair(certFile, certFile)
	if errors.Is(err, os.ErrNotExist) {
		return "", errNoCert
	}
	if err != nil {
		return "", fmt.Errorf("the kubelet's client certificate %s: %w", certFile, err)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch resp.StatusCode {
	case http.StatusCreated, http.StatusOK:
		return Created, nil
	case http.StatusConflict:
		return Existed, nil
	}
	return "", fmt.Errorf("POST %s: %s: %s", url, resp.Status, bytes.TrimSpace(msg))
}

//go:build tools

// Package tools records the upstream commands this module builds, so that
// `go mod tidy` keeps their dependencies.
package tools

import (
	_ "go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "sigs.k8s.io/apiserver-network-proxy/cmd/agent"
	_ "sigs.k8s.io/apiserver-network-proxy/cmd/server"
)

// Package credential turns a tenant credential kubeconfig into a REST
// config, honouring only what a hostile writer of the Secret cannot turn
// against its reader. It is the part of internal/tenantcache that
// kubefarm-pxe uses too, so it imports nothing of the manager.
package credential

import (
	"errors"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig takes the server, CA and client certificate of the
// kubeconfig's current context, and nothing else. Whoever can write
// Secrets in a tenant's namespace can write this one; honouring the rest of
// a kubeconfig (a token or certificate file, an exec plugin, an auth
// provider, a proxy, impersonation) would let them make the reader read
// its own files, run commands or send its service account token away.
// The parser's own messages are not passed on: they may quote the file,
// which holds a key.
func RESTConfig(data []byte, userAgent string) (*rest.Config, error) {
	if len(data) == 0 {
		return nil, errors.New("no kubeconfig")
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, errors.New("the kubeconfig does not parse")
	}
	kctx := kc.Contexts[kc.CurrentContext]
	if kctx == nil {
		return nil, fmt.Errorf("the kubeconfig has no context %q", kc.CurrentContext)
	}
	cluster, user := kc.Clusters[kctx.Cluster], kc.AuthInfos[kctx.AuthInfo]
	if cluster == nil || user == nil {
		return nil, fmt.Errorf("context %q names a cluster or user the kubeconfig lacks", kc.CurrentContext)
	}
	if cluster.Server == "" || len(cluster.CertificateAuthorityData) == 0 ||
		len(user.ClientCertificateData) == 0 || len(user.ClientKeyData) == 0 {
		return nil, errors.New("the kubeconfig lacks a server, an embedded CA or an embedded client certificate and key")
	}
	return &rest.Config{
		Host: cluster.Server,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: cluster.CertificateAuthorityData, CertData: user.ClientCertificateData, KeyData: user.ClientKeyData,
		},
		UserAgent: userAgent,
	}, nil
}

// Package encryptiontest checks encryption at rest end to end against a
// real kube-apiserver and etcd: the configuration kubefarm renders, read
// back from etcd directly, through a whole key rotation. It has only
// tests; it is a package of its own because it restarts its API server,
// which the shared environments of the other packages cannot do.
package encryptiontest

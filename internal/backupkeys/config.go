package backupkeys

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"

	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
)

// FromEncryptionConfiguration reads the keys of a tenant's rendered
// EncryptionConfiguration (the `<tenant>-encryption-config` Secret's
// encryption-configuration.json, which a backup job can mount: the key
// Secret's write key is an annotation, which a volume does not carry). The
// write key is the first secretbox key, as kube-apiserver writes with it.
// Anything kubefarm does not render (another resource, another provider
// with keys) is refused, naming the field, rather than half backed up.
func FromEncryptionConfiguration(b []byte) (write string, keys map[string][]byte, err error) {
	if len(b) > MaxFileSize {
		return "", nil, fmt.Errorf("encryption configuration: %d bytes, at most %d", len(b), MaxFileSize)
	}
	var cfg apiserverv1.EncryptionConfiguration
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return "", nil, fmt.Errorf("encryption configuration: %w", err)
	}
	if cfg.Kind != "EncryptionConfiguration" || cfg.APIVersion != apiserverv1.SchemeGroupVersion.String() {
		return "", nil, fmt.Errorf("encryption configuration: kind %.60q apiVersion %.60q, want EncryptionConfiguration %s", cfg.Kind, cfg.APIVersion, apiserverv1.SchemeGroupVersion)
	}
	if len(cfg.Resources) != 1 || len(cfg.Resources[0].Resources) != 1 || cfg.Resources[0].Resources[0] != "secrets" {
		return "", nil, fmt.Errorf("encryption configuration: resources must be [secrets] alone, as kubefarm renders it")
	}
	keys = map[string][]byte{}
	for i, p := range cfg.Resources[0].Providers {
		switch {
		case p.Identity != nil:
		case p.Secretbox != nil && write == "" && len(p.Secretbox.Keys) > 0:
			for j, k := range p.Secretbox.Keys {
				secret, err := base64.StdEncoding.DecodeString(k.Secret)
				if err != nil {
					return "", nil, fmt.Errorf("encryption configuration: resources[0].providers[%d].secretbox.keys[%d] (%.40q): secret is not base64", i, j, k.Name)
				}
				if _, dup := keys[k.Name]; dup {
					return "", nil, fmt.Errorf("encryption configuration: resources[0].providers[%d].secretbox.keys[%d]: %.40q twice", i, j, k.Name)
				}
				keys[k.Name] = secret
			}
			write = p.Secretbox.Keys[0].Name
		default:
			return "", nil, fmt.Errorf("encryption configuration: resources[0].providers[%d]: kubefarm renders one secretbox provider and identity only", i)
		}
	}
	if write == "" {
		return "", nil, fmt.Errorf("encryption configuration: no secretbox keys: Secrets are stored in the clear")
	}
	return write, keys, nil
}

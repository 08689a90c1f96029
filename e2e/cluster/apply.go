package cluster

import (
	"context"
	"fmt"
	"io"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

// kubectlApply server-side applies every object of a multi-document YAML as
// the admin, like `kubectl apply --server-side` would.
func (c *Cluster) kubectlApply(ctx context.Context, manifests string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.AdminKubeconfig())
	if err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if len(obj.Object) == 0 {
			continue
		}
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		data, err := obj.MarshalJSON()
		if err != nil {
			return err
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if ns := obj.GetNamespace(); ns != "" {
			ri = dyn.Resource(mapping.Resource).Namespace(ns)
		}
		force := true
		if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data,
			metav1.PatchOptions{FieldManager: "kubefarm-e2e", Force: &force}); err != nil {
			return fmt.Errorf("applying %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
	}
}

package cni_test

import (
	"strings"
	"testing"

	"github.com/kubefarm/kubefarm/images/node/cni"
)

func TestChainText(t *testing.T) {
	got := cni.ChainText("c0", map[string]string{"portmap": "p", "bandwidth": "b"})
	if want := "conflist c0\nbandwidth b\nportmap p\n"; got != want {
		t.Errorf("got %q want %q", got, want)
	}
}

// TestConflistPlugins keeps ConflistPlugins equal to the image's conflist.
func TestConflistPlugins(t *testing.T) {
	got := chainTypesOf(t, recipeConflist(t))
	if strings.Join(got, ",") != strings.Join(cni.ConflistPlugins, ",") {
		t.Fatalf("conflist plugins %v, ConflistPlugins %v", got, cni.ConflistPlugins)
	}
}

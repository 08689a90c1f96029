// Package imagecheck is kubefarm-pxe's BootImage controller: for every
// BootImage it fetches the kernel, initrd and rootfs into the replica's
// content-addressed artifact cache (so a machine's first boot does not wait
// for the download) and records in the ArtifactsVerified and Ready
// conditions whether they could be fetched and match their digests.
//
// The messages say what kubefarm-pxe did, never what a source answered:
// the BootImage's author reads them, and chose the source.
//
// Decide is the pure verdict; the Reconciler only fetches, calls it and
// writes the status.
package imagecheck

import (
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/conditions"
	"github.com/kubefarm/kubefarm/internal/fetchguard"
	"github.com/kubefarm/kubefarm/pxe/httpboot"
)

// Result is what the cache made of one artifact of a BootImage.
type Result struct {
	// Name is kernel, initrd or rootfs.
	Name string
	// Field is the spec field the artifact is fetched from:
	// spec.repository, or spec.<name>.url without one.
	Field string
	// Digest is the artifact's spec digest.
	Digest string
	// Size is the cached file's size in bytes, when Err is nil.
	Size int64
	// Err is Store.Ensure's error (or the size lookup's).
	Err error
}

// maxErrorLen bounds each artifact's error in a message, so that three long
// errors stay far below a condition message's 32 KiB.
const maxErrorLen = 512

// Decide is the ArtifactsVerified condition for results, in spec order, and
// Ready mirroring it. A refused address decides over a digest mismatch,
// and both over a fetch failure: they are facts about the image (its
// source is somewhere kubefarm-pxe does not fetch from; its content is
// not what it claims), not about this replica's network. Every failed
// artifact is named, with the spec field it came from.
func Decide(results []Result) (verified, ready metav1.Condition) {
	var refused, mismatched, failed, ok []string
	for _, r := range results {
		var ref *fetchguard.RefusedError
		switch {
		case r.Err == nil:
			ok = append(ok, fmt.Sprintf("%s %s (%s)", r.Name, shortDigest(r.Digest), humanBytes(r.Size)))
		case errors.As(r.Err, &ref):
			// The refusal's own text: the address and its class.
			refused = append(refused, fmt.Sprintf("%s %s (%s): %s", r.Name, r.Digest, r.Field, ref.Error()))
		case errors.Is(r.Err, httpboot.ErrDigestMismatch):
			// Written here rather than the error's text: the expected
			// digest only, never anything about what was received.
			mismatched = append(mismatched, fmt.Sprintf("%s (%s): %s %s", r.Name, r.Field, httpboot.ErrDigestMismatch, r.Digest))
		default:
			failed = append(failed, fmt.Sprintf("%s %s (%s): %s", r.Name, r.Digest, r.Field, truncate(r.Err.Error())))
		}
	}
	switch {
	case len(refused) > 0:
		verified = conditions.New(kubefarmv1.ConditionArtifactsVerified, false, kubefarmv1.ReasonArtifactAddressRefused,
			"source address refused: "+strings.Join(append(append(refused, mismatched...), failed...), "; "))
	case len(mismatched) > 0:
		verified = conditions.New(kubefarmv1.ConditionArtifactsVerified, false, kubefarmv1.ReasonDigestMismatch,
			"content does not match its digest: "+strings.Join(append(mismatched, failed...), "; "))
	case len(failed) > 0:
		verified = conditions.New(kubefarmv1.ConditionArtifactsVerified, false, kubefarmv1.ReasonArtifactFetchFailed,
			"cannot fetch: "+strings.Join(failed, "; "))
	default:
		verified = conditions.New(kubefarmv1.ConditionArtifactsVerified, true, kubefarmv1.ReasonArtifactsCached,
			"fetched and verified: "+strings.Join(ok, ", "))
	}
	ready = verified
	ready.Type = kubefarmv1.ConditionReady
	return verified, ready
}

// WarningReasons are the reasons whose events are Warnings.
var WarningReasons = []string{kubefarmv1.ReasonArtifactAddressRefused, kubefarmv1.ReasonDigestMismatch, kubefarmv1.ReasonArtifactFetchFailed}

// shortDigest is sha256: and the first 12 hex digits, as container tools
// print image IDs.
func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}

func truncate(s string) string {
	if len(s) <= maxErrorLen {
		return s
	}
	return s[:maxErrorLen] + "..."
}

// humanBytes prints n in binary units with one decimal, bytes below 1 KiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

package v1alpha1

// Reasons of the BootImage conditions, written by kubefarm-pxe
// (pxe/imagecheck) after fetching the image's kernel, initrd and rootfs into
// its artifact cache. Ready mirrors ArtifactsVerified, reason included. Like
// the other kinds' reasons they are part of the API (kubectl wait, alerts,
// the reason of the event each change emits), so they are constants.
const (
	// ReasonArtifactsCached: the three artifacts were fetched (or already
	// cached) and each matches its digest; the message gives their sizes.
	ReasonArtifactsCached = "ArtifactsCached"
	// ReasonArtifactAddressRefused: fetching an artifact would connect to
	// an address kubefarm-pxe never fetches from (loopback, link-local and
	// cloud metadata, the admin cluster's Service and Pod ranges of
	// --fetch-denied-cidrs, its API server), by the URL, a redirect, or
	// the repository's registry, its token service or blob redirect.
	// Nothing was sent to it. The message names the artifact, the spec
	// field and the address's class. Takes precedence over the other two.
	ReasonArtifactAddressRefused = "ArtifactAddressRefused"
	// ReasonDigestMismatch: a source delivered content whose sha256 is not
	// the artifact's digest; the message names the artifact and the
	// expected digest, never what was received. It is never served. Takes
	// precedence over ReasonArtifactFetchFailed.
	ReasonDigestMismatch = "DigestMismatch"
	// ReasonArtifactFetchFailed: an artifact could not be fetched (an
	// unreachable or refusing source, a size above --max-artifact-size, a
	// full disk); the message names the artifact and the error, with an
	// HTTP status code but never what the source answered. Retried with
	// backoff.
	ReasonArtifactFetchFailed = "ArtifactFetchFailed"
)

// BootImageConditionTypes are the condition types a BootImage carries, both
// written by kubefarm-pxe (pxe/imagecheck). printcolumns_test.go holds the
// CRDs' printer columns to this list.
var BootImageConditionTypes = []string{ConditionArtifactsVerified, ConditionReady}

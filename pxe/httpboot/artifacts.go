package httpboot

// What iPXE fetches: the machine's script (/boot), the artifacts it names
// (/artifacts) and, for UEFI HTTP boot, the iPXE binaries (/ipxe).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"github.com/go-logr/logr"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/bootpaths"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
	"github.com/kubefarm/kubefarm/pxe/events"
)

// boot serves the iPXE script of the machine with rawMAC, once its
// artifacts are cached.
func (h *Handler) boot(w http.ResponseWriter, r *http.Request, rawMAC string) {
	mac, err := bootproto.NormalizeMAC(rawMAC)
	if err != nil {
		http.Error(w, "bad MAC address", http.StatusBadRequest)
		return
	}
	m, ok := h.machines.ByMAC(mac)
	if !ok {
		h.unclaimed(w, r, mac)
		return
	}
	key := machineKey(m)
	log := h.log.WithValues("mac", mac, "machine", key, "peer", r.RemoteAddr)
	// The objects below missing is a state the controllers will repair (a
	// pool or image being created), so 503: retry later, not "no such
	// machine".
	imgName, _ := ImageFor(m)
	img, ok := h.machines.BootImage(imgName)
	if !ok {
		log.Info("machine's boot image not found", "image", imgName)
		// The machine retries every few seconds: the Recorder's throttle
		// makes that one Warning per interval.
		h.warning(key, events.ReasonBootImageMissing, imgName, func() string { return imageMissingMessage(m, imgName) })
		http.Error(w, "boot image not available", http.StatusServiceUnavailable)
		return
	}
	pool, ok := h.machines.Pool(m.Namespace, m.Spec.Pool)
	if !ok {
		log.Info("machine's pool not found", "pool", m.Spec.Pool)
		h.warning(key, events.ReasonPoolMissing, m.Spec.Pool, func() string {
			return fmt.Sprintf("NodePool %s/%s (spec.pool) not found: kubefarm-pxe answers this machine's boot script requests 503 until it exists (kubectl get nodepools -n %s)",
				m.Namespace, m.Spec.Pool, m.Namespace)
		})
		http.Error(w, "node pool not available", http.StatusServiceUnavailable)
		return
	}
	script, err := Script(m, img, pool, h.cfg.BaseURL)
	if err != nil {
		log.Error(err, "building iPXE script")
		http.Error(w, "cannot build boot script", http.StatusServiceUnavailable)
		return
	}
	if !h.ensureArtifacts(w, r, img, log) {
		return
	}
	log.Info("serving boot script", "image", img.Name, "rootfs", img.Spec.Rootfs.Digest)
	if r.Method == http.MethodGet {
		h.normal(key, events.ReasonScriptServed, "", func() string {
			return fmt.Sprintf("served the iPXE script for image %s (root filesystem %s) to %s", img.Name, img.Spec.Rootfs.Digest, peerHost(r))
		})
	}
	writeScript(w, r, script)
}

// imageMissingMessage is the BootImageMissing Warning on machine m, whose
// image (ImageFor) is name.
func imageMissingMessage(m *kubefarmv1.Machine, name string) string {
	const answer = "kubefarm-pxe answers this machine's boot script requests 503 until"
	if name == "" {
		return "the machine names no BootImage (spec.desiredImage is empty): " + answer + " it names one that exists (kubectl get bootimages)"
	}
	field := "spec.desiredImage"
	if s := m.Status.ServedImage; s != nil && s.Name != "" {
		field = "status.servedImage"
	}
	return fmt.Sprintf("BootImage %q (%s) not found: %s it exists (kubectl get bootimages)", name, field, answer)
}

// ensureArtifacts fetches img's artifacts before a script that names them
// is handed out: a script whose kernel 404s fails the boot, a 503 here is
// retried. False when it answered 503.
func (h *Handler) ensureArtifacts(w http.ResponseWriter, r *http.Request, img *kubefarmv1.BootImage, log logr.Logger) bool {
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.EnsureTimeout)
	defer cancel()
	for _, a := range []kubefarmv1.Artifact{img.Spec.Kernel, img.Spec.Initrd, img.Spec.Rootfs} {
		if err := h.store.Ensure(ctx, a, img.Spec.Repository); err != nil {
			log.Error(err, "caching artifact", "image", img.Name, "digest", a.Digest)
			http.Error(w, "boot artifacts not available yet", http.StatusServiceUnavailable)
			return false
		}
	}
	return true
}

// writeScript answers an iPXE script.
func writeScript(w http.ResponseWriter, r *http.Request, script string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	// Scripts change when the served image flips; never cache them.
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(script)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = io.WriteString(w, script)
}

func (h *Handler) artifact(w http.ResponseWriter, r *http.Request, digest string) {
	if !bootproto.ValidDigest(digest) {
		http.NotFound(w, r)
		return
	}
	f, err := h.store.Open(digest)
	if err != nil {
		if !errors.Is(err, ErrNotCached) {
			h.log.Error(err, "opening artifact", "digest", digest)
		}
		http.NotFound(w, r)
		return
	}
	defer f.Close()
	serveFile(w, r, f, `"`+digest+`"`, "public, max-age=31536000, immutable")
	h.artifactServed(w, r, f, digest)
}

// artifactServed records ImageServed on the machine whose address fetched
// a whole artifact. Ranged or interrupted downloads are counted in the
// metrics only: their parts do not say when an artifact was "served".
func (h *Handler) artifactServed(w http.ResponseWriter, r *http.Request, f *os.File, digest string) {
	cw, ok := w.(*countingWriter)
	if h.cfg.Events == nil || !ok || cw.code != http.StatusOK || r.Method != http.MethodGet {
		return
	}
	fi, err := f.Stat()
	if err != nil || cw.n != fi.Size() {
		return
	}
	m, ok := h.machines.ByIP(peerHost(r))
	if !ok {
		return
	}
	h.normal(machineKey(m), events.ReasonImageServed, digest, func() string {
		what, image := "artifact", ""
		if name, _ := ImageFor(m); name != "" {
			if img, ok := h.machines.BootImage(name); ok {
				image = " of image " + img.Name
				switch digest {
				case img.Spec.Kernel.Digest:
					what = "kernel"
				case img.Spec.Initrd.Digest:
					what = "initrd"
				case img.Spec.Rootfs.Digest:
					what = "root filesystem"
				}
			}
		}
		return fmt.Sprintf("served the %s %s%s (%d bytes) to %s", what, digest, image, cw.n, peerHost(r))
	})
}

func (h *Handler) ipxe(w http.ResponseWriter, r *http.Request, name string) {
	if !bootpaths.IsBinary(name) || h.cfg.IPXEDir == "" {
		http.NotFound(w, r)
		return
	}
	f, err := os.Open(filepath.Join(h.cfg.IPXEDir, name))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer f.Close()
	// Binaries are replaced by package upgrades under the same name: let
	// ServeContent's Last-Modified drive revalidation instead of an ETag.
	serveFile(w, r, f, "", "no-cache")
}

// serveFile hands an *os.File to http.ServeContent, which answers Range and
// conditional requests and, through the ResponseWriter's ReadFrom, lets the
// kernel copy the file to the socket (sendfile).
func serveFile(w http.ResponseWriter, r *http.Request, f *os.File, etag, cacheControl string) {
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", cacheControl)
	if etag != "" {
		w.Header().Set("ETag", etag)
	}
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

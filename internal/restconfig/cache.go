package restconfig

import (
	"crypto/sha256"
	"sync"

	"k8s.io/client-go/rest"
)

// Cache keeps one client (of any kind) per key, made from a REST config by
// dial, and makes a new one when the config's identity (Fingerprint)
// changes: a renewed certificate, a recreated PKI, a new address. A failed
// dial is not kept. It is what the manager's controllers use to keep a
// tenant's client from one pass to the next. Safe for concurrent use.
type Cache[K comparable, T any] struct {
	dial func(*rest.Config) (T, error)

	mu   sync.Mutex
	kept map[K]cached[T]
}

type cached[T any] struct {
	credential [sha256.Size]byte
	client     T
}

// NewCache returns an empty cache whose clients dial makes.
func NewCache[K comparable, T any](dial func(*rest.Config) (T, error)) *Cache[K, T] {
	return &Cache[K, T]{dial: dial, kept: map[K]cached[T]{}}
}

// Get returns the client kept for key when cfg carries the same address
// and credential, else a new one, which replaces it.
func (c *Cache[K, T]) Get(key K, cfg *rest.Config) (T, error) {
	credential := Fingerprint(cfg)
	c.mu.Lock()
	kept, ok := c.kept[key]
	c.mu.Unlock()
	if ok && kept.credential == credential {
		return kept.client, nil
	}
	client, err := c.dial(cfg)
	if err != nil {
		var zero T
		return zero, err
	}
	c.mu.Lock()
	c.kept[key] = cached[T]{credential: credential, client: client}
	c.mu.Unlock()
	return client, nil
}

// Forget drops the client of key.
func (c *Cache[K, T]) Forget(key K) {
	c.mu.Lock()
	delete(c.kept, key)
	c.mu.Unlock()
}

// Len is how many clients are kept.
func (c *Cache[K, T]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.kept)
}

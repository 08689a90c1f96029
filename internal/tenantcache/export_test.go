package tenantcache

// Informers is how many shared informers run in t.
func Informers(t *Tenant) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.informers)
}

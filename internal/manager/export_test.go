package manager

// CacheAllSecrets makes New cache every Secret, as before OwnedSecrets: the
// memory benchmark's baseline.
func CacheAllSecrets(o *Options) { o.cacheAllSecrets = true }

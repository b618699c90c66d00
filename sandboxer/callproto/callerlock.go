package callproto

// CallerLock is the lock file beside a socket that keeps a bermd started on demand from
// leaving under its callers: `berm run` holds it shared from before it looks for a bermd until
// its call ends, and such a bermd exits only once it has taken it exclusively (and then
// removes its socket before it lets go). One place for the name: both sides must agree on it.
func CallerLock(socket string) string { return socket + ".lock" }

package dataplane

// reusePortSupported: Linux balances SO_REUSEPORT sockets by 5-tuple hash.
const reusePortSupported = true

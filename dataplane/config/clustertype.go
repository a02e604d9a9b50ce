package config

import "strings"

// Cluster types, spelled as in stunnerd's config.
const (
	// ClusterStatic clusters list IP addresses and CIDR prefixes. The default.
	ClusterStatic = "STATIC"
	// ClusterStrictDNS clusters list host names; the dataplane resolves
	// them and keeps re-resolving them, and allows every address of the
	// latest answer.
	ClusterStrictDNS = "STRICT_DNS"
)

// IsStrictDNS reports whether the cluster's endpoints are host names to
// resolve. Type is compared case-insensitively, as stunnerd does.
func (cl Cluster) IsStrictDNS() bool { return strings.EqualFold(cl.Type, ClusterStrictDNS) }

// validClusterType reports whether t is empty (STATIC) or a known type.
func validClusterType(t string) bool {
	return t == "" || strings.EqualFold(t, ClusterStatic) || strings.EqualFold(t, ClusterStrictDNS)
}

// ValidHostname reports whether s is a DNS host name (RFC 1123 labels of
// letters, digits and hyphens, 1-63 bytes each, at most 253 bytes in all,
// with an optional final dot). Underscores are accepted too: they occur in
// real names (SRV-style labels), and the resolver, not the syntax, is the
// judge of what exists.
func ValidHostname(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

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

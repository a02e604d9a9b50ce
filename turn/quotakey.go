package turn

// quotaUserKey is what AllocationsPerUser counts a USERNAME by: the user id
// of a TURN REST API username (draft-uberti-behave-turn-rest-00 §2.2), so
// that every credential minted for one user, "<expiry>:<user>" with a new
// expiry each time, shares that user's quota, as STUNner's user quota does
// ("quotas are per user-id"). The user id is split off as
// ParseEphemeralUsername does, like the expiry check: timestamp first,
// separator ':', and also "<user>:<expiry>". A username with no expiry in
// it, or with an empty user id ("<expiry>:" or "<expiry>", which STUNner's
// auth service mints when the application passes no username), counts by
// itself: there is no user to count by, and one shared key would put every
// anonymous client of an application under one quota. A static username
// that happens to look like "<digits>:<user>" counts as <user>, which
// changes nothing for the one username of static auth.
//
// The key is derived from the username alone, not from the auth type, so a
// slot is given back under the key it was taken under whatever a
// reconfiguration changes in between.
func quotaUserKey(username string) string {
	if _, user, ok := ParseEphemeralUsername(username); ok && user != "" {
		return user
	}
	return username
}

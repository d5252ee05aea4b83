package auth

import (
	"strings"

	"github.com/valyala/fasthttp"
)

// Capability is a set of permissions, a bitset. A Principal holds the union of
// what its roles grant; a route requires a set (see Required), and a request
// passes when the held set covers the required one.
type Capability uint8

// The capabilities. They are independent bits, not a ladder: Write does not
// imply Read (a write-only producer cannot pop), and Admin alone implies
// neither (the admin role grants all three explicitly).
const (
	// Read allows the read-only routes: status, resources, messages, DLQ,
	// traces and consumer-group listings.
	Read Capability = 1 << iota
	// Write allows producing (POST /api/v1/push).
	Write
	// Admin allows the administrative routes: /api/v1/system/*, deleting
	// queues and consumer groups, and every route the policy does not list.
	Admin
)

// Has reports whether c covers every bit of need. Has(0) is always true.
func (c Capability) Has(need Capability) bool { return c&need == need }

// String renders c as "read|write|admin" (the bits held, in that order), or
// "none" for the empty set.
func (c Capability) String() string {
	if c == 0 {
		return "none"
	}
	var parts []string
	for _, b := range []struct {
		bit  Capability
		name string
	}{{Read, "read"}, {Write, "write"}, {Admin, "admin"}} {
		if c&b.bit != 0 {
			parts = append(parts, b.name)
		}
	}
	if rest := c &^ (Read | Write | Admin); rest != 0 {
		parts = append(parts, "unknown")
	}
	return strings.Join(parts, "|")
}

// The role names a token may carry, in the roles claims (Config.RolesClaim,
// Config.RolesArrayClaim). Names are matched exactly (case-sensitive).
const (
	// RoleWriteOnly grants Write: a producer that may push and nothing else.
	RoleWriteOnly = "write-only"
	// RoleReadOnly grants Read.
	RoleReadOnly = "read-only"
	// RoleReadWrite grants Read|Write: consumers (pop, ack, lease, seek).
	RoleReadWrite = "read-write"
	// RoleAdmin grants Read|Write|Admin.
	RoleAdmin = "admin"
)

// roleGrants maps a role name to what it grants. Unknown names grant nothing.
var roleGrants = map[string]Capability{
	RoleWriteOnly: Write,
	RoleReadOnly:  Read,
	RoleReadWrite: Read | Write,
	RoleAdmin:     Read | Write | Admin,
}

// CapsForRoles returns the union of what roles grant. Unknown role names and
// duplicates are ignored; nil or empty roles grant nothing (0).
func CapsForRoles(roles []string) Capability {
	var c Capability
	for _, r := range roles {
		c |= roleGrants[r]
	}
	return c
}

// Required returns the capabilities a request needs, from its method (upper
// case, as sent: "GET", "POST", ...) and its URL path (without the query
// string). Trailing slashes are ignored. The policy, checked in this order:
//
//	any method  /api/v1/system and anything under /api/v1/system/      Admin
//	POST        /api/v1/push                                           Write
//	POST        /api/v1/ack, /api/v1/ack/batch                         Read|Write
//	POST        /api/v1/lease/{id}/extend                              Read|Write
//	POST        /api/v1/transaction, /api/v1/configure                 Read|Write
//	POST        /api/v1/consumer-groups/{g}/queues/{q}/seek            Read|Write
//	POST        /api/v1/consumer-groups/{g}/queues/{q}/partitions/{p}/seek  Read|Write
//	POST        /api/v1/consumer-groups/{g}/subscription               Read|Write
//	POST        /api/v1/traces                                         Read|Write
//	GET         /api/v1/pop and anything under /api/v1/pop/            Read|Write
//	            (queue pops and the namespace/task pop ?namespace=&task=)
//	DELETE      /api/v1/messages/{partitionId}/{transactionId}        Read|Write
//	POST        /streams/v1/queries, /streams/v1/cycle                 Read|Write
//	POST        /streams/v1/state/get                                  Read
//	DELETE      /api/v1/resources/queues/{q}                           Admin
//	DELETE      /api/v1/consumer-groups/{g}[/queues/{q}]               Admin
//	GET         any other path under /api/v1/                          Read
//	            (resources, messages, traces, DLQ, /status*, /analytics/*)
//	anything else (other methods, HEAD, paths outside /api/v1/)        Admin
//
// The last line is deny by default: a route nobody listed needs Admin. Public
// routes (health, metrics) are exempted by Config.SkipPaths, not here. A
// {param} matches one non-empty path segment.
func Required(method, path string) Capability {
	for len(path) > 1 && strings.HasSuffix(path, "/") {
		path = path[:len(path)-1]
	}
	s := strings.Split(strings.TrimPrefix(path, "/"), "/")
	if c, ok := streamsRequired(method, s); ok {
		return c
	}
	if len(s) < 3 || s[0] != "api" || s[1] != "v1" {
		return Admin
	}
	s = s[2:] // below /api/v1/
	if s[0] == "system" {
		return Admin
	}
	switch method {
	case fasthttp.MethodPost:
		switch {
		case match(s, "push"):
			return Write
		case match(s, "ack"), match(s, "ack", "batch"),
			match(s, "lease", "*", "extend"),
			match(s, "transaction"), match(s, "configure"),
			match(s, "consumer-groups", "*", "queues", "*", "seek"),
			match(s, "consumer-groups", "*", "queues", "*", "partitions", "*", "seek"),
			match(s, "consumer-groups", "*", "subscription"),
			match(s, "traces"):
			return Read | Write
		}
	case fasthttp.MethodGet:
		if s[0] == "pop" {
			return Read | Write
		}
		return Read
	case fasthttp.MethodDelete:
		if match(s, "messages", "*", "*") {
			return Read | Write
		}
		// Listed for the record: they would be Admin by default anyway.
		switch {
		case match(s, "resources", "queues", "*"),
			match(s, "consumer-groups", "*"),
			match(s, "consumer-groups", "*", "queues", "*"):
			return Admin
		}
	}
	return Admin
}

// streamsRequired is the policy of Queen's stream routes (POST only; no
// /api prefix): queries and cycle write (state, sink push, source ack) and
// need Read|Write, state/get needs Read. ok is false for other paths.
func streamsRequired(method string, s []string) (Capability, bool) {
	if len(s) < 3 || s[0] != "streams" || s[1] != "v1" || method != fasthttp.MethodPost {
		return 0, false
	}
	switch {
	case match(s[2:], "queries"), match(s[2:], "cycle"):
		return Read | Write, true
	case match(s[2:], "state", "get"):
		return Read, true
	}
	return 0, false
}

// match reports whether segs equals pattern, where a "*" in pattern matches
// any one non-empty segment.
func match(segs []string, pattern ...string) bool {
	if len(segs) != len(pattern) {
		return false
	}
	for i, p := range pattern {
		if p == "*" {
			if segs[i] == "" {
				return false
			}
		} else if segs[i] != p {
			return false
		}
	}
	return true
}

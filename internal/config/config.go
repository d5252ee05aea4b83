// Package config is the broker's configuration: one table (Vars) of every
// environment variable the broker reads, with its default, unit,
// description and parser. Load parses the environment through it, `queen
// help` prints it and docs/configuration.md is generated from it, so the
// three cannot drift apart (cmd/queen tests compare the committed file
// with the generated one).
//
// Rules every variable follows:
//   - an unset or empty variable takes its default, and the default is
//     parsed by the same parser as a set value;
//   - a value that does not parse (LOG_LEVEL=verbose, PORT=abc, a negative
//     size, JWT_ENABLED=yes) is an error at start that names the variable;
//     there is no silent fallback to the default;
//   - booleans are exactly "true" or "false";
//   - values of secret variables (passwords, keys) never appear in errors.
//
// # Adding a variable
//
// Add one row to Vars (in the section it belongs to) with a field of Config
// as its destination, e.g.
//
//	intVar("QUEEN_MAX_HEADER_BYTES", 8192, unitBytes, 1024, 1<<20,
//		"largest request header block; a larger one is answered 431",
//		func(c *Config) *int { return &c.MaxHeaderBytes }),
//
// then run `go generate ./cmd/queen` to regenerate docs/configuration.md.
// A variable read anywhere else through Load's getenv (auth.ConfigFromEnv
// reads the JWT_* ones) must have a row too: TestEveryReadVariableIsListed
// fails otherwise.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queenmq/queen-go/auth"
	"github.com/queenmq/queen-go/console"
	"github.com/queenmq/queen-go/crypt"
	"github.com/queenmq/queen-go/fastapi"
	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/pg"
	"github.com/queenmq/queen-go/wal"
)

// Units shown in the table.
const (
	unitNone  = ""
	unitBytes = "bytes"
	unitMS    = "ms"
	unitSec   = "s"
)

// Sections, in the order help and the docs show them.
const (
	SectionHTTP     = "HTTP"
	SectionPG       = "PostgreSQL"
	SectionWAL      = "WAL and push"
	SectionAuth     = "Authentication (JWT)"
	SectionCrypto   = "Encryption at rest"
	SectionLogDebug = "Logging and debugging"
)

// Sections lists the sections in display order.
var Sections = []string{SectionHTTP, SectionPG, SectionWAL, SectionAuth, SectionCrypto, SectionLogDebug}

// Var is one environment variable.
type Var struct {
	// Name is the variable's name (Queen's name where Queen has one).
	Name string
	// Section groups it in help and the docs.
	Section string
	// Default is the value an unset (or empty) variable takes, as it would
	// be written in the environment; "" means none (the feature is off or
	// the value is empty).
	Default string
	// Unit is the unit of a number ("bytes", "ms", "s"), else "".
	Unit string
	// Doc says what it does, in one or two sentences.
	Doc string
	// Secret hides the value in error messages.
	Secret bool
	// parse checks v (non-empty, trimmed) and stores it in c; its error
	// says what is wanted, without the variable's name (Load adds it).
	parse func(c *Config, v string) error
}

// Config is the parsed environment. The zero value is not useful; build
// it with Load.
type Config struct {
	// Port and Host make the listen address (PORT, HOST).
	Port int
	Host string
	// MaxBodyBytes is the request body limit in bytes (QUEEN_MAX_BODY_BYTES).
	MaxBodyBytes int
	// BodyMemoryBytes bounds the request body bytes held at once, all
	// connections together (QUEEN_BODY_MEMORY_BYTES; 0 = four times
	// MaxBodyBytes).
	BodyMemoryBytes int
	// MaxConns bounds concurrent connections; 0 = fasthttp's own bound
	// (QUEEN_MAX_CONNS; default fastapi.DefaultMaxConns; ConnLimit).
	MaxConns int
	// MaxHeaderBytes is the request head limit, request line and header
	// fields together (QUEEN_MAX_HEADER_BYTES).
	MaxHeaderBytes int
	// ReadTimeout bounds reading one request (QUEEN_READ_TIMEOUT_MS).
	ReadTimeout time.Duration
	// WriteTimeout bounds writing one answer (QUEEN_WRITE_TIMEOUT_MS).
	WriteTimeout time.Duration
	// WriteStallTimeout bounds how long a pop answer over 64 KiB may wait
	// for the client to take its next 256 KiB
	// (QUEEN_WRITE_STALL_TIMEOUT_MS; fastapi.Config.WriteStallTimeout).
	WriteStallTimeout time.Duration
	// MaxPendingAnswerBytes bounds the pop answers in memory; 0 = 4 ×
	// MaxPopBytes (QUEEN_MAX_PENDING_ANSWER_BYTES;
	// fastapi.Config.MaxPendingAnswerBytes).
	MaxPendingAnswerBytes int
	// DBTimeout is the deadline of the PostgreSQL work of pops, acks, lease
	// extension, configure, transactions and the maintenance flags
	// (QUEEN_DB_TIMEOUT_MS).
	DBTimeout time.Duration
	// AdminDBTimeout is the same for the resource, admin, message and
	// trace routes (QUEEN_ADMIN_DB_TIMEOUT_MS).
	AdminDBTimeout time.Duration
	// Pprof serves /debug/pprof/ (QUEEN_PPROF).
	Pprof bool
	// Console serves the web console (QUEEN_CONSOLE); ConsolePath is its
	// path prefix, normalized to end in "/" (QUEEN_CONSOLE_PATH).
	Console     bool
	ConsolePath string

	// PGURLRaw is QUEEN_PG_URL ("" = build the URL from the PG_* fields).
	PGURLRaw                                 string
	PGHost, PGPort, PGUser, PGPassword, PGDB string
	// PGUseSSL leaves sslmode to the driver's default (PG_USE_SSL).
	PGUseSSL bool
	// PoolSize is the PostgreSQL connection pool size (DB_POOL_SIZE).
	PoolSize int
	// MaxPopBytes bounds one pop's messages in bytes (QUEEN_MAX_POP_BYTES;
	// pg.Config.MaxPopBytes).
	MaxPopBytes int
	// SegmentCompression stores segment bodies compressed where that pays
	// (QUEEN_SEGMENT_COMPRESSION, default true; pg.Config.PlainSegments).
	SegmentCompression bool
	// RetentionInterval is the time between retention passes
	// (RETENTION_INTERVAL).
	RetentionInterval time.Duration
	// PGBin is where dev mode finds PostgreSQL's binaries (PG_BIN); read by
	// internal/pgcluster itself, listed here for help and the docs.
	PGBin string

	// WALDir is the broker directory (FILE_BUFFER_DIR).
	WALDir string
	// WALSegmentBytes, WALMaxBytes: QUEEN_WAL_SEGMENT_BYTES, QUEEN_WAL_MAX_BYTES.
	WALSegmentBytes int
	WALMaxBytes     int
	// WALPreallocate writes each WAL segment with zeros ahead of its
	// records, so a group commit is an fdatasync with no metadata change
	// (QUEEN_WAL_PREALLOCATE, default true; wal.Options.NoPreallocate).
	WALPreallocate bool
	// WALRetentionSeconds keeps projected WAL segments this long; 0 =
	// truncate once projected (QUEEN_WAL_RETENTION_SECONDS).
	WALRetentionSeconds int
	// VerdictTimeout is the longest wait for PostgreSQL's verdict on a push
	// (QUEEN_PUSH_VERDICT_TIMEOUT_MS).
	VerdictTimeout time.Duration
	// MaxPushItems is the most items one push may carry; 0 = no limit
	// (QUEEN_MAX_PUSH_ITEMS).
	MaxPushItems int
	// MaxPushPartitions is the most distinct partitions one push may name
	// (QUEEN_MAX_PUSH_PARTITIONS).
	MaxPushPartitions int

	// Auth is the JWT configuration (JWT_*), built by auth.ConfigFromEnv
	// after the table's own checks.
	Auth auth.Config
	// EncryptionKey is QUEEN_ENCRYPTION_KEY parsed; nil when unset.
	EncryptionKey *crypt.Key

	// LogLevel is LOG_LEVEL.
	LogLevel slog.Level

	// set records the variables given a non-empty value.
	set map[string]bool
}

// IsSet reports whether the environment gave name a non-empty value.
func (c *Config) IsSet(name string) bool { return c.set[name] }

// DatabaseConfigured reports whether a database was named (QUEEN_PG_URL or
// PG_HOST set); dev mode starts a throwaway PostgreSQL when not.
func (c *Config) DatabaseConfigured() bool { return c.IsSet("QUEEN_PG_URL") || c.IsSet("PG_HOST") }

// Addr is the listen address host:port.
func (c *Config) Addr() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) }

// PGURL is QUEEN_PG_URL, or a URL built from PG_HOST, PG_PORT, PG_USER,
// PG_PASSWORD, PG_DB and PG_USE_SSL (sslmode=disable unless PG_USE_SSL=true).
func (c *Config) PGURL() string {
	if c.PGURLRaw != "" {
		return c.PGURLRaw
	}
	u := url.URL{Scheme: "postgres", Host: net.JoinHostPort(c.PGHost, c.PGPort), Path: "/" + c.PGDB}
	if c.PGPassword != "" {
		u.User = url.UserPassword(c.PGUser, c.PGPassword)
	} else {
		u.User = url.User(c.PGUser)
	}
	if !c.PGUseSSL {
		u.RawQuery = url.Values{"sslmode": {"disable"}}.Encode()
	}
	return u.String()
}

// WALRetention maps QUEEN_WAL_RETENTION_SECONDS to projector.Config's
// WALRetention (0 seconds = truncate as soon as projected, which the
// projector spells as a negative duration).
func (c *Config) WALRetention() time.Duration {
	if c.WALRetentionSeconds == 0 {
		return -1
	}
	return time.Duration(c.WALRetentionSeconds) * time.Second
}

// PushItemLimit maps QUEEN_MAX_PUSH_ITEMS to broker.Config's
// MaxPushItems (0 items = no limit, which broker.Config spells as a
// negative number: its 0 takes the default).
func (c *Config) PushItemLimit() int {
	if c.MaxPushItems == 0 {
		return -1
	}
	return c.MaxPushItems
}

// ConnLimit maps QUEEN_MAX_CONNS to fastapi.Config's MaxConns, as
// PushItemLimit does (0 = fasthttp's own bound becomes -1).
func (c *Config) ConnLimit() int {
	if c.MaxConns == 0 {
		return -1
	}
	return c.MaxConns
}

// PushPartitionLimit maps QUEEN_MAX_PUSH_PARTITIONS to broker.Config's
// MaxPushPartitions, as PushItemLimit does (0 = no limit becomes -1).
func (c *Config) PushPartitionLimit() int {
	if c.MaxPushPartitions == 0 {
		return -1
	}
	return c.MaxPushPartitions
}

// Vars is the table of every environment variable the broker reads.
var Vars = []Var{
	// HTTP
	intVar("PORT", SectionHTTP, 6632, unitNone, 0, 65535,
		"TCP port of the HTTP API (0 = any free port).",
		func(c *Config) *int { return &c.Port }),
	strVar("HOST", SectionHTTP, "0.0.0.0",
		"Listen address of the HTTP API. `queen dev` defaults to 127.0.0.1.",
		func(c *Config) *string { return &c.Host }),
	intVar("QUEEN_MAX_BODY_BYTES", SectionHTTP, 64<<20, unitBytes, 1, math.MaxInt32,
		"Largest request body (64 MiB); a larger one is answered 413.",
		func(c *Config) *int { return &c.MaxBodyBytes }),
	intVar("QUEEN_BODY_MEMORY_BYTES", SectionHTTP, 0, unitBytes, 0, math.MaxInt,
		"Most bytes of request bodies the broker holds at once, all connections together, beyond each body's first 64 KiB (which are always received). A body arriving while the rest is held is answered 503 with `Retry-After: 1` and changes nothing, so that connections sending large bodies slowly, or stalling, cannot make the broker hold unbounded memory. 0 = four times the body limit (256 MiB by default); a value below the body limit is refused.",
		func(c *Config) *int { return &c.BodyMemoryBytes }),
	intVar("QUEEN_MAX_POP_BYTES", SectionHTTP, pg.DefaultMaxPopBytes, unitBytes, 1, math.MaxInt32,
		"Most bytes of messages one pop answers (16 MiB), counted as they are stored (payload, transactionId, ids and times): a pop stops at the segment that reaches it and delivers the rest later, and always delivers at least one message however large. It bounds the memory and time one pop costs the broker (docs/consume.md, \"How much one pop returns\").",
		func(c *Config) *int { return &c.MaxPopBytes }),
	intVar("QUEEN_MAX_PENDING_ANSWER_BYTES", SectionHTTP, 0, unitBytes, 0, math.MaxInt,
		"Budget of pop answers in memory: the bytes of answers over 64 KiB built and not yet written. 0 = 4 × `QUEEN_MAX_POP_BYTES` (64 MiB). A pop's bound shrinks to what they leave (not below 64 KiB); a leased pop whose answer does not fit beside them gives its lease back (no delivery attempt counted) and delivers the messages that fit, an autoAck pop's answer is counted whole; while they hold it all, pops deliver one message each. So clients that pop and never read make the broker hold about this much, until `QUEEN_WRITE_STALL_TIMEOUT_MS` drops their answers, and other clients' pops keep being answered (docs/operations.md, \"Memory\"). Answers of 64 KiB or less are written at once and not counted.",
		func(c *Config) *int { return &c.MaxPendingAnswerBytes }),
	intVar("QUEEN_MAX_CONNS", SectionHTTP, fastapi.DefaultMaxConns, unitNone, 0, math.MaxInt32,
		"Concurrent HTTP connections; over it a new connection is answered 503 (`{\"error\": ...}`, `Retry-After: 1`) and closed. Each holds a head buffer (`QUEEN_MAX_HEADER_BYTES`) and a write buffer, 64 KiB together by default, so the default bounds them near 640 MB. 0 = fasthttp's own bound (262144).",
		func(c *Config) *int { return &c.MaxConns }),
	intVar("QUEEN_MAX_HEADER_BYTES", SectionHTTP, fastapi.DefaultMaxHeaderBytes, unitBytes, fastapi.MinMaxHeaderBytes, fastapi.MaxMaxHeaderBytes,
		"Request head limit: request line and header fields together. One buffer of this size is held per connection. Above it the answer is 431, or 414 when the request line (the URL) alone does not fit.",
		func(c *Config) *int { return &c.MaxHeaderBytes }),
	durVar("QUEEN_READ_TIMEOUT_MS", SectionHTTP, 30000, time.Millisecond, 1,
		"Longest time to read one request, head and body, from its first byte: a request not received in time (a slow client, a body shorter than its Content-Length) is answered 408. It must let the largest body arrive over the slowest link served (64 MiB in 30 s is 2.2 MB/s).",
		func(c *Config) *time.Duration { return &c.ReadTimeout }),
	durVar("QUEEN_WRITE_TIMEOUT_MS", SectionHTTP, int(fastapi.DefaultWriteTimeout/time.Millisecond), time.Millisecond, 1,
		"Longest time to write one answer, from when it is ready (a long-poll's wait is not counted): a client that stops reading is disconnected then and the answer's memory freed (a pop answer over 64 KiB sooner: `QUEEN_WRITE_STALL_TIMEOUT_MS`). It must let the largest answer leave over the slowest link served.",
		func(c *Config) *time.Duration { return &c.WriteTimeout }),
	durVar("QUEEN_WRITE_STALL_TIMEOUT_MS", SectionHTTP, int(fastapi.DefaultWriteStallTimeout/time.Millisecond), time.Millisecond, 1,
		"Longest time a pop answer over 64 KiB may wait for the client to take its next 256 KiB: a client that stops reading is disconnected then, whatever is left of `QUEEN_WRITE_TIMEOUT_MS`, and the answer's memory freed (its messages return when their lease lapses, as for any delivery that failed). A client reading 26 kB/s is never cut off by it.",
		func(c *Config) *time.Duration { return &c.WriteStallTimeout }),
	durVar("QUEEN_DB_TIMEOUT_MS", SectionHTTP, int(fastapi.DefaultDBTimeout/time.Millisecond), time.Millisecond, 1,
		"Deadline of the PostgreSQL work of a pop without wait (and of each attempt of a waiting pop, which gets at least 1 s), acks, lease extension, configure, transactions and the maintenance flags; past it the answer is 503. A pop's `COMMIT` already sent is waited for past it, 30 s at most, so that a commit that happened is answered as one.",
		func(c *Config) *time.Duration { return &c.DBTimeout }),
	durVar("QUEEN_ADMIN_DB_TIMEOUT_MS", SectionHTTP, int(fastapi.DefaultAdminDBTimeout/time.Millisecond), time.Millisecond, 1,
		"The same deadline for the resource, admin, message and trace routes.",
		func(c *Config) *time.Duration { return &c.AdminDBTimeout }),
	boolVar("QUEEN_CONSOLE", SectionHTTP, true,
		"`true` serves the web console (docs/console.md) at QUEEN_CONSOLE_PATH; its files are public, the API calls it makes are authenticated as any client's.",
		func(c *Config) *bool { return &c.Console }),
	{Name: "QUEEN_CONSOLE_PATH", Section: SectionHTTP, Default: console.DefaultPath,
		Doc: "URL path prefix of the web console, e.g. `/console/`; not under `/api`, `/health`, `/metrics` or `/debug`.",
		parse: func(c *Config, v string) error {
			p, err := console.NormalizePath(v)
			if err != nil {
				return errors.New(strings.TrimPrefix(err.Error(), console.ErrBadPath.Error()+": "))
			}
			c.ConsolePath = p
			return nil
		}},

	// PostgreSQL
	{Name: "QUEEN_PG_URL", Section: SectionPG, Secret: true,
		Doc: "PostgreSQL connection URL or keyword/value string. When set, the PG_* variables below are ignored.",
		parse: func(c *Config, v string) error {
			if _, err := pgx.ParseConfig(v); err != nil {
				return errors.New("not a PostgreSQL connection string (postgres://user:password@host:port/db?sslmode=...)")
			}
			c.PGURLRaw = v
			return nil
		}},
	strVar("PG_HOST", SectionPG, "localhost", "PostgreSQL host (without QUEEN_PG_URL).",
		func(c *Config) *string { return &c.PGHost }),
	{Name: "PG_PORT", Section: SectionPG, Default: "5432", Doc: "PostgreSQL port.",
		parse: func(c *Config, v string) error {
			if n, err := strconv.Atoi(v); err != nil || n < 1 || n > 65535 {
				return errors.New("want a port number in 1..65535")
			}
			c.PGPort = v
			return nil
		}},
	strVar("PG_USER", SectionPG, "postgres", "PostgreSQL user.",
		func(c *Config) *string { return &c.PGUser }),
	{Name: "PG_PASSWORD", Section: SectionPG, Secret: true, Doc: "PostgreSQL password.",
		parse: func(c *Config, v string) error { c.PGPassword = v; return nil }},
	strVar("PG_DB", SectionPG, "postgres", "PostgreSQL database.",
		func(c *Config) *string { return &c.PGDB }),
	boolVar("PG_USE_SSL", SectionPG, false,
		"`true` leaves `sslmode` to the driver's default (`prefer`); `false` connects with `sslmode=disable`.",
		func(c *Config) *bool { return &c.PGUseSSL }),
	intVar("DB_POOL_SIZE", SectionPG, 10, unitNone, 1, 10000,
		"PostgreSQL connections in the pool. The listing routes (status, analytics, resources, consumer groups, DLQ, messages, traces) run at most a quarter of it at once (at least 1), so that heavy reads never take the connections the projector, pops and acks need; a listing that waits more than 10 s for its turn is answered 503 with `Retry-After: 1`.",
		func(c *Config) *int { return &c.PoolSize }),
	boolVar("QUEEN_SEGMENT_COMPRESSION", SectionPG, true,
		"`true` stores a segment's messages compressed (S2) when that saves at least a sixteenth of a body of 1 KiB or more, so PostgreSQL receives, logs and stores fewer bytes; other bodies are stored as they are. PostgreSQL's own compression of the column is off either way (STORAGE EXTERNAL), so `false` stores every body at its full size: use it only while brokers of a version before compression (which cannot read compressed bodies) share the database during a rolling upgrade, or before going back to such a version (docs/operations.md, \"Upgrading\"). Every broker of this version reads both forms.",
		func(c *Config) *bool { return &c.SegmentCompression }),
	durVar("RETENTION_INTERVAL", SectionPG, 300000, time.Millisecond, 100,
		"Time between message retention passes (whole segments past their queue's retention are deleted).",
		func(c *Config) *time.Duration { return &c.RetentionInterval }),
	strVar("PG_BIN", SectionPG, "",
		"`queen dev` and the tests: directory of PostgreSQL's binaries (initdb, pg_ctl) for a throwaway server. Default: PATH, then the newest /usr/lib/postgresql/*/bin.",
		func(c *Config) *string { return &c.PGBin }),

	// WAL and push
	strVar("FILE_BUFFER_DIR", SectionWAL, "/var/lib/queen/buffers",
		"Broker directory: the WAL (`wal/`) and `broker.id`; created if missing. The broker's user must be able to create or write it (the default's parent `/var/lib/queen` is usually root's: create the directory for that user, or set this); if it cannot, the broker stops at start with an error naming this variable. `queen dev` uses a temporary directory, deleted on exit, unless this is set.",
		func(c *Config) *string { return &c.WALDir }),
	intVar("QUEEN_WAL_SEGMENT_BYTES", SectionWAL, wal.DefaultSegmentSize, unitBytes, 4096, math.MaxInt32,
		"Target size of one WAL segment file (4 MiB). The broker keeps the tail segment and the last sealed one in memory, plus one dropped segment buffer that it reuses for the next segment once the projector has released it, so this sets most of its WAL memory (about 3 × this).",
		func(c *Config) *int { return &c.WALSegmentBytes }),
	intVar("QUEEN_WAL_MAX_BYTES", SectionWAL, 0, unitBytes, 0, math.MaxInt,
		"Cap on the WAL's segment files; 0 = no cap. At least 4 segments. Beyond it pushes answer `failed` (nothing stored) instead of filling the disk PostgreSQL may share; above 3/4 of it projected segments are truncated before their retention.",
		func(c *Config) *int { return &c.WALMaxBytes }),
	boolVar("QUEEN_WAL_PREALLOCATE", SectionWAL, true,
		"`true` writes each WAL segment file full of zeros (and fsyncs it) ahead of its records, off the push path, so every group commit overwrites allocated blocks and needs only an `fdatasync` (on ext4 about a quarter less CPU and latency per commit than an appending `fsync`). `false` appends to empty files, as earlier builds did: for copy-on-write file systems (btrfs, ZFS), where the zeros buy nothing.",
		func(c *Config) *bool { return &c.WALPreallocate }),
	intVar("QUEEN_WAL_RETENTION_SECONDS", SectionWAL, 900, unitSec, 0, math.MaxInt32,
		"Keep projected WAL segments this long, so a PostgreSQL restored from a backup can be re-projected; 0 = truncate once projected.",
		func(c *Config) *int { return &c.WALRetentionSeconds }),
	durVar("QUEEN_PUSH_VERDICT_TIMEOUT_MS", SectionWAL, 5000, time.Millisecond, 1,
		"Longest wait for PostgreSQL's verdict on a push before it is answered `buffered` (it is in the WAL either way).",
		func(c *Config) *time.Duration { return &c.VerdictTimeout }),
	intVar("QUEEN_MAX_PUSH_ITEMS", SectionWAL, ingest.DefaultMaxPushItems, unitNone, 0, math.MaxInt32,
		"Most items one push may carry; a longer push is answered 400 naming the limit (nothing stored), and items past the limit are never decoded, so what a push can cost the broker is bounded. 0 = no limit. A push is one WAL record: a larger one is projected into PostgreSQL in pieces, each its own transaction.",
		func(c *Config) *int { return &c.MaxPushItems }),
	intVar("QUEEN_MAX_PUSH_PARTITIONS", SectionWAL, ingest.DefaultMaxPushPartitions, unitNone, 0, math.MaxInt32,
		"Most distinct partitions (queue and partition pairs) one push may name; more is answered 400 naming the limit (nothing stored). A push naming 128 or more new ones creates them itself before its WAL append; fewer, or a creation that did not finish within 2 s, are created by the projector in order with everything it writes, where they delay every other producer's verdicts (100,000 new queues in one push: more than 5 s; 1,000: at most about 0.1 s) ([push.md](push.md), \"Large pushes\"). 0 = no limit.",
		func(c *Config) *int { return &c.MaxPushPartitions }),

	// Authentication: auth.ConfigFromEnv builds auth.Config from these;
	// the rows add strictness where it would silently fall back.
	boolVar("JWT_ENABLED", SectionAuth, false,
		"`true` requires a valid bearer token on every route but the skip paths.",
		func(c *Config) *bool { return &c.Auth.Enabled }),
	{Name: "JWT_ALGORITHM", Section: SectionAuth, Default: auth.DefaultAlgorithm,
		Doc:   "`HS256` (JWT_SECRET), `RS256` or `EdDSA` (JWT_PUBLIC_KEY or JWT_JWKS_URL), or `auto` (any of those with a key).",
		parse: oneOf(auth.AlgHS256, auth.AlgRS256, auth.AlgEdDSA, auth.AlgAuto)},
	{Name: "JWT_SECRET", Section: SectionAuth, Secret: true, Doc: "HMAC key for HS256.", parse: nop},
	{Name: "JWT_PUBLIC_KEY", Section: SectionAuth, Secret: true,
		Doc: "PEM public key (RSA or Ed25519, PKIX, PKCS#1 or a certificate); `\\n` escapes are accepted.", parse: nop},
	{Name: "JWT_JWKS_URL", Section: SectionAuth, Doc: "http(s) URL of a JSON Web Key Set; tokens with a `kid` are verified with its keys.", parse: nop},
	{Name: "JWT_JWKS_REFRESH_INTERVAL", Section: SectionAuth, Unit: unitSec,
		Default: strconv.Itoa(int(auth.DefaultJWKSRefreshInterval / time.Second)),
		Doc:     "How often the JWKS is fetched again.", parse: positiveInt},
	{Name: "JWT_JWKS_TIMEOUT_MS", Section: SectionAuth, Unit: unitMS,
		Default: strconv.Itoa(int(auth.DefaultJWKSTimeout / time.Millisecond)),
		Doc:     "Timeout of one JWKS fetch.", parse: positiveInt},
	{Name: "JWT_ISSUER", Section: SectionAuth, Doc: "Required `iss` claim, when set.", parse: nop},
	{Name: "JWT_AUDIENCE", Section: SectionAuth, Doc: "Required `aud` entry, when set.", parse: nop},
	{Name: "JWT_CLOCK_SKEW", Section: SectionAuth, Unit: unitSec,
		Default: strconv.Itoa(int(auth.DefaultClockSkew / time.Second)),
		Doc:     "Leeway on `exp`, `nbf` and `iat` (a token issued further in the future is refused).", parse: nonNegativeInt},
	{Name: "JWT_REQUIRE_EXP", Section: SectionAuth, Default: "true",
		Doc:   "`true` refuses tokens without an `exp` claim; `false` accepts them (a present `exp` is always checked). Tokens with a `crit` header are always refused (RFC 7515 §4.1.11).",
		parse: oneOf("true", "false")},
	{Name: "JWT_SKIP_PATHS", Section: SectionAuth, Default: auth.DefaultSkipPaths,
		Doc: "Comma-separated paths served without a token; an entry ending in `/` is a prefix. Every entry starts with `/` (a request path always does, so an entry without it would never match).",
		parse: func(c *Config, v string) error {
			for _, p := range auth.ParseSkipPaths(v) {
				if !strings.HasPrefix(p, "/") {
					return fmt.Errorf("entry %q does not start with /", p)
				}
			}
			return nil
		}},
	{Name: "JWT_ROLES_CLAIM", Section: SectionAuth, Default: auth.DefaultRolesClaim,
		Doc: "Claim holding one role (string).", parse: nop},
	{Name: "JWT_ROLES_ARRAY_CLAIM", Section: SectionAuth, Default: auth.DefaultRolesArrayClaim,
		Doc: "Claim holding roles (array of strings); a token's roles are the union of both claims.", parse: nop},

	// Encryption at rest
	{Name: "QUEEN_ENCRYPTION_KEY", Section: SectionCrypto, Secret: true,
		Doc: "64 hexadecimal characters: the AES-256-GCM key for queues with `encryptionEnabled` (payloads are encrypted in PostgreSQL). Without it such queues are stored in plaintext, with a warning.",
		parse: func(c *Config, v string) error {
			k, err := crypt.ParseKey(v)
			if err != nil {
				return fmt.Errorf("want %d hexadecimal characters", crypt.KeyHexLen)
			}
			c.EncryptionKey = k
			return nil
		}},

	// Logging and debugging
	{Name: "LOG_LEVEL", Section: SectionLogDebug, Default: "info", Doc: "`debug`, `info`, `warn` or `error`.",
		parse: func(c *Config, v string) error {
			levels := map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}
			l, ok := levels[strings.ToLower(v)]
			if !ok {
				return errors.New("want debug, info, warn or error")
			}
			c.LogLevel = l
			return nil
		}},
	boolVar("QUEEN_PPROF", SectionLogDebug, false, "`true` serves Go's pprof profiles under `/debug/pprof/`.",
		func(c *Config) *bool { return &c.Pprof }),
	// GOMEMLIMIT is read by the Go runtime itself; the row documents the
	// broker's default and checks the value's shape.
	{Name: "GOMEMLIMIT", Section: SectionLogDebug, Default: "44MiB",
		Doc: "The Go runtime's soft memory limit (a number with B, KiB, MiB or GiB, or `off`). When unset the broker sets 44 MiB: its live heap is small, and without a limit the collector lets the heap reach twice its live size at every peak, so peak RSS followed the push rate. The limit is soft: a body larger than it still fits, the collector works harder until it is gone. A higher limit buys CPU with memory: at 50 connections × 100 items, 40 MiB cost about 2 µs of broker CPU a message more than 44 MiB, and 48 MiB brought peak RSS near 62 MB. Go's runtime reads the variable before the broker does: a value it cannot read (`GOMEMLIMIT=lots`) stops the process at once with the runtime's own `malformed GOMEMLIMIT` error and a stack trace, not with the broker's error naming the variable.",
		parse: func(c *Config, v string) error {
			if v == "off" {
				return nil
			}
			n := strings.TrimRight(v, "KMGTiB")
			if _, err := strconv.ParseUint(n, 10, 64); err != nil || n == "" {
				return errors.New("want a byte count such as 64MiB, or off")
			}
			return nil
		}},
}

// DefaultMemoryLimit is the Go runtime's soft memory limit the broker sets
// when GOMEMLIMIT is unset (see the GOMEMLIMIT row).
const DefaultMemoryLimit = 44 << 20

// Lookup returns the row of name.
func Lookup(name string) (Var, bool) {
	for _, v := range Vars {
		if v.Name == name {
			return v, true
		}
	}
	return Var{}, false
}

// Load parses the environment, read through getenv (os.Getenv in the
// broker), with the table. Every variable that does not parse is reported,
// all at once (errors.Join), each error naming its variable, e.g.
// `PORT="abc": want an integer in 0..65535`.
func Load(getenv func(string) string) (*Config, error) {
	c := &Config{set: map[string]bool{}}
	var errs []error
	for _, v := range Vars {
		val := strings.TrimSpace(getenv(v.Name))
		if val != "" {
			c.set[v.Name] = true
		} else {
			val = v.Default
		}
		if val == "" {
			continue
		}
		if err := v.parse(c, val); err != nil {
			if v.Secret {
				errs = append(errs, fmt.Errorf("%s: %v", v.Name, err))
			} else {
				errs = append(errs, fmt.Errorf("%s=%q: %v", v.Name, val, err))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if c.BodyMemoryBytes > 0 && c.BodyMemoryBytes < c.MaxBodyBytes {
		return nil, fmt.Errorf("QUEEN_BODY_MEMORY_BYTES=%d: want 0 or at least QUEEN_MAX_BODY_BYTES=%d, else a body of the largest size could never be received",
			c.BodyMemoryBytes, c.MaxBodyBytes)
	}
	if c.WALMaxBytes > 0 && c.WALMaxBytes < wal.MinSegmentsUnderCap*c.WALSegmentBytes {
		return nil, fmt.Errorf("QUEEN_WAL_MAX_BYTES=%d: want 0 or at least %d segments of QUEEN_WAL_SEGMENT_BYTES=%d (%d bytes)",
			c.WALMaxBytes, wal.MinSegmentsUnderCap, c.WALSegmentBytes, wal.MinSegmentsUnderCap*c.WALSegmentBytes)
	}
	a, err := auth.ConfigFromEnv(getenv)
	if err != nil {
		return nil, err // auth's errors name the variable
	}
	c.Auth = a
	return c, nil
}

// Row constructors: each parses into one Config field.

func intVar(name, section string, def int, unit string, lo, hi int, doc string, dst func(*Config) *int) Var {
	want := fmt.Sprintf("want an integer in %d..%d", lo, hi)
	if hi == math.MaxInt || hi == math.MaxInt32 {
		want = fmt.Sprintf("want an integer of at least %d", lo)
		if lo == 0 {
			want = "want a non-negative integer"
		}
	}
	return Var{Name: name, Section: section, Default: strconv.Itoa(def), Unit: unit, Doc: doc,
		parse: func(c *Config, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < int64(lo) || n > int64(hi) {
				return errors.New(want)
			}
			*dst(c) = int(n)
			return nil
		}}
}

// durVar is a whole number of unit (milliseconds or seconds), at least lo.
func durVar(name, section string, def int, unit time.Duration, lo int, doc string, dst func(*Config) *time.Duration) Var {
	u := unitMS
	if unit == time.Second {
		u = unitSec
	}
	return Var{Name: name, Section: section, Default: strconv.Itoa(def), Unit: u, Doc: doc,
		parse: func(c *Config, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < int64(lo) || n > math.MaxInt64/int64(unit) {
				return fmt.Errorf("want a whole number of %s, at least %d", map[string]string{unitMS: "milliseconds", unitSec: "seconds"}[u], lo)
			}
			*dst(c) = time.Duration(n) * unit
			return nil
		}}
}

func strVar(name, section, def, doc string, dst func(*Config) *string) Var {
	return Var{Name: name, Section: section, Default: def, Doc: doc,
		parse: func(c *Config, v string) error { *dst(c) = v; return nil }}
}

func boolVar(name, section string, def bool, doc string, dst func(*Config) *bool) Var {
	return Var{Name: name, Section: section, Default: strconv.FormatBool(def), Doc: doc,
		parse: func(c *Config, v string) error {
			switch v {
			case "true":
				*dst(c) = true
			case "false":
				*dst(c) = false
			default:
				return errors.New("want true or false")
			}
			return nil
		}}
}

func oneOf(values ...string) func(*Config, string) error {
	return func(_ *Config, v string) error {
		for _, w := range values {
			if v == w {
				return nil
			}
		}
		return fmt.Errorf("want one of %s", strings.Join(values, ", "))
	}
}

func nop(*Config, string) error { return nil }

func positiveInt(_ *Config, v string) error {
	if n, err := strconv.ParseInt(v, 10, 32); err != nil || n <= 0 {
		return errors.New("want a positive integer")
	}
	return nil
}

func nonNegativeInt(_ *Config, v string) error {
	if n, err := strconv.ParseInt(v, 10, 32); err != nil || n < 0 {
		return errors.New("want a non-negative integer")
	}
	return nil
}

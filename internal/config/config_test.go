package config

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/queen-go/wal"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestDefaults: an empty environment loads, and every default is the
// value the broker documented before the table existed.
func TestDefaults(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name string
		got  any
		want any
	}{
		{"addr", c.Addr(), "0.0.0.0:6632"},
		{"body", c.MaxBodyBytes, 64 << 20},
		{"read timeout", c.ReadTimeout, 30 * time.Second},
		{"pg url", c.PGURL(), "postgres://postgres@localhost:5432/postgres?sslmode=disable"},
		{"pool", c.PoolSize, 10},
		{"retention interval", c.RetentionInterval, 5 * time.Minute},
		{"wal dir", c.WALDir, "/var/lib/queen/buffers"},
		{"segment", c.WALSegmentBytes, wal.DefaultSegmentSize},
		{"preallocate", c.WALPreallocate, true},
		{"segment compression", c.SegmentCompression, true},
		{"wal retention", c.WALRetention(), 15 * time.Minute},
		{"verdict", c.VerdictTimeout, 5 * time.Second},
		{"log level", c.LogLevel, slog.LevelInfo},
		{"jwt", c.Auth.Enabled, false},
		{"skew", c.Auth.ClockSkew, 30 * time.Second},
		{"db configured", c.DatabaseConfigured(), false},
	}
	for _, tt := range checks {
		if tt.got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	if c.EncryptionKey != nil {
		t.Error("an encryption key without QUEEN_ENCRYPTION_KEY")
	}
}

// TestGoodValues: set values land in their fields.
func TestGoodValues(t *testing.T) {
	c, err := Load(env(map[string]string{
		"PORT": "0", "HOST": "127.0.0.1", "LOG_LEVEL": "DEBUG", "PG_HOST": "db", "PG_PORT": "6000",
		"PG_PASSWORD": "p w", "PG_USE_SSL": "true", "QUEEN_WAL_RETENTION_SECONDS": "0", "QUEEN_WAL_PREALLOCATE": "false",
		"QUEEN_SEGMENT_COMPRESSION": "false",
		"QUEEN_ENCRYPTION_KEY":      strings.Repeat("ab", 32), "QUEEN_PPROF": "true", "JWT_ENABLED": "true",
		"JWT_SECRET": "s", " QUEEN_READ_TIMEOUT_MS": "x", "QUEEN_READ_TIMEOUT_MS": " 250 ",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr() != "127.0.0.1:0" || c.LogLevel != slog.LevelDebug || !c.Pprof || !c.Auth.Enabled ||
		c.EncryptionKey == nil || c.WALRetention() >= 0 || c.ReadTimeout != 250*time.Millisecond || c.WALPreallocate ||
		c.SegmentCompression {
		t.Errorf("config %+v", c)
	}
	if got, want := c.PGURL(), "postgres://postgres:p%20w@db:6000/postgres"; got != want {
		t.Errorf("PGURL = %q, want %q", got, want)
	}
	if !c.DatabaseConfigured() || !c.IsSet("PORT") || c.IsSet("FILE_BUFFER_DIR") {
		t.Error("IsSet/DatabaseConfigured")
	}
}

// TestBadValues: a value that does not parse is an error naming the
// variable, never a silent default.
func TestBadValues(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"LOG_LEVEL": "verbose"}, `LOG_LEVEL="verbose": want debug, info, warn or error`},
		{map[string]string{"PORT": "abc"}, `PORT="abc": want an integer in 0..65535`},
		{map[string]string{"PORT": "70000"}, `PORT="70000"`},
		{map[string]string{"QUEEN_MAX_BODY_BYTES": "-1"}, `QUEEN_MAX_BODY_BYTES="-1": want an integer of at least 1`},
		{map[string]string{"QUEEN_WAL_MAX_BYTES": "-5"}, `QUEEN_WAL_MAX_BYTES="-5": want a non-negative integer`},
		{map[string]string{"QUEEN_BODY_MEMORY_BYTES": "1000"}, `QUEEN_BODY_MEMORY_BYTES=1000: want 0 or at least QUEEN_MAX_BODY_BYTES=67108864`},
		{map[string]string{"QUEEN_WAL_MAX_BYTES": "1000"}, `QUEEN_WAL_MAX_BYTES=1000: want 0 or at least 4 segments`},
		{map[string]string{"QUEEN_WAL_SEGMENT_BYTES": "1k"}, `QUEEN_WAL_SEGMENT_BYTES="1k"`},
		{map[string]string{"QUEEN_READ_TIMEOUT_MS": "0"}, `QUEEN_READ_TIMEOUT_MS="0": want a whole number of milliseconds, at least 1`},
		{map[string]string{"RETENTION_INTERVAL": "5"}, `RETENTION_INTERVAL="5"`},
		{map[string]string{"DB_POOL_SIZE": "0"}, `DB_POOL_SIZE="0"`},
		{map[string]string{"PG_PORT": "x"}, `PG_PORT="x": want a port number`},
		{map[string]string{"PG_USE_SSL": "yes"}, `PG_USE_SSL="yes": want true or false`},
		{map[string]string{"QUEEN_PPROF": "1"}, `QUEEN_PPROF="1": want true or false`},
		{map[string]string{"JWT_ENABLED": "True"}, `JWT_ENABLED="True": want true or false`},
		{map[string]string{"JWT_ALGORITHM": "none"}, `JWT_ALGORITHM="none": want one of HS256, RS256, EdDSA, auto`},
		{map[string]string{"JWT_CLOCK_SKEW": "-1"}, `JWT_CLOCK_SKEW="-1"`},
		{map[string]string{"JWT_JWKS_TIMEOUT_MS": "0"}, `JWT_JWKS_TIMEOUT_MS="0"`},
		{map[string]string{"JWT_ENABLED": "true"}, `JWT_SECRET`}, // auth's own combination check
		{map[string]string{"JWT_SKIP_PATHS": "/metrics, health"}, `JWT_SKIP_PATHS="/metrics, health": entry "health" does not start with /`},
		{map[string]string{"QUEEN_ENCRYPTION_KEY": "secretsecret"}, `QUEEN_ENCRYPTION_KEY: want 64 hexadecimal characters`},
		{map[string]string{"QUEEN_PG_URL": "postgres://u:hunter2@h:x/db"}, `QUEEN_PG_URL: not a PostgreSQL connection string`},
	} {
		_, err := Load(env(tt.env))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want it to contain %q", tt.env, err, tt.want)
			continue
		}
		for k, v := range tt.env {
			if r, _ := Lookup(k); r.Secret && strings.Contains(err.Error(), v) {
				t.Errorf("%s's value appears in the error %q", k, err)
			}
		}
	}
	// Several bad variables are reported together.
	_, err := Load(env(map[string]string{"PORT": "abc", "LOG_LEVEL": "verbose"}))
	if err == nil || !strings.Contains(err.Error(), "PORT") || !strings.Contains(err.Error(), "LOG_LEVEL") {
		t.Errorf("two bad variables: %v", err)
	}
}

// TestEveryReadVariableIsListed: every variable Load reads, including
// those auth.ConfigFromEnv reads, has a row, so help and the docs list it.
func TestEveryReadVariableIsListed(t *testing.T) {
	read := map[string]bool{}
	if _, err := Load(func(k string) string { read[k] = true; return "" }); err != nil {
		t.Fatal(err)
	}
	for k := range read {
		if _, ok := Lookup(k); !ok {
			t.Errorf("%s is read but has no row in config.Vars", k)
		}
	}
	seen := map[string]bool{}
	for _, v := range Vars {
		if seen[v.Name] {
			t.Errorf("%s has two rows", v.Name)
		}
		seen[v.Name] = true
		if v.Doc == "" || v.Section == "" || v.parse == nil {
			t.Errorf("%s: row without a doc, section or parser", v.Name)
		}
		if !read[v.Name] {
			t.Errorf("%s has a row but Load never reads it", v.Name)
		}
	}
}

// TestTextListsEveryVariable: help shows each variable with its default
// and unit.
func TestTextListsEveryVariable(t *testing.T) {
	var b strings.Builder
	WriteText(&b)
	out := b.String()
	for _, v := range Vars {
		if !strings.Contains(out, v.Name) || !strings.Contains(out, v.defaultText()) {
			t.Errorf("help lacks %s with default %q", v.Name, v.defaultText())
		}
	}
	if !strings.Contains(out, "  QUEEN_MAX_BODY_BYTES           default 67108864 bytes\n") {
		t.Errorf("help format:\n%s", out)
	}
}

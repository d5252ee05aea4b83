package pg

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
)

// Class is what kind of failure a Store error is, for callers that must
// answer for it (the HTTP layer maps each class to one status). Classify
// computes it; the rules live here and nowhere else.
type Class int

const (
	// ClassNone is a nil error.
	ClassNone Class = iota
	// ClassUnavailable: PostgreSQL could not be reached, did not answer
	// within the request's deadline, or refuses service for now: no
	// connection could be made (any *pgconn.ConnectError), a connection
	// broke (network errors, EOF, a closed connection or pool), the context
	// ended (deadline or cancel), or the server reported SQLSTATE class 08
	// (connection exception), 53 (insufficient resources: too many
	// connections, disk full, out of memory), 57P01–57P05 (shutdown, crash
	// restart, cannot connect now, database dropped, idle session timeout),
	// 57014 (statement cancelled, as a statement_timeout does) or 25006
	// (read-only transaction: the host is a standby, as after a failover
	// the connection string does not yet point past). The only class that
	// may be reported as "database unavailable" (HTTP 503).
	ClassUnavailable
	// ClassConflict: a serialization failure (40001) or deadlock (40P01),
	// still there after the Store's own retries. Running the request again
	// is safe (the transaction rolled back) and will normally succeed.
	ClassConflict
	// ClassVanished: a foreign-key violation (23503). The Store references
	// only rows it has just read, so this means a concurrent transaction
	// deleted them (a queue deleted while a pop or ack was running): the
	// request refers to something that no longer exists. Pop and Ack retry
	// it themselves and then see the queue or partition gone.
	ClassVanished
	// ClassInvalidText: PostgreSQL refused a text value the request
	// carried: SQLSTATE 22021 (a NUL byte, or bytes that are not UTF-8)
	// or 22P05 (a character the database encoding cannot hold). The HTTP
	// routes check names and ids before any SQL runs; this class is the
	// net under a route that missed one: the client's mistake (HTTP 400),
	// and the statement changed nothing.
	ClassInvalidText
	// ClassInternal: anything else (a constraint this code should never
	// violate, a syntax error, a corrupt segment, a decryption failure...).
	// A bug or a damaged database, not an outage: it is logged in full and
	// never reported as "database unavailable".
	ClassInternal
)

// String names the class ("unavailable", "conflict", ...).
func (c Class) String() string {
	switch c {
	case ClassNone:
		return "none"
	case ClassUnavailable:
		return "unavailable"
	case ClassConflict:
		return "conflict"
	case ClassVanished:
		return "vanished"
	case ClassInvalidText:
		return "invalid text"
	}
	return "internal"
}

// SQLSTATE codes the classification and the retries name.
const (
	codeSerializationFailure = "40001"
	codeDeadlock             = "40P01"
	codeForeignKeyViolation  = "23503"
	codeQueryCanceled        = "57014"
	codeReadOnlyTransaction  = "25006"
	// codeCharacterNotInRepertoire: a NUL byte or invalid UTF-8 in text.
	codeCharacterNotInRepertoire = "22021"
	codeUntranslatableCharacter  = "22P05"
)

// Classify sorts err (from any Store method, wrapped or not) into its
// Class; see each class for the rules. A server-reported error is judged by
// its SQLSTATE (pgconn.PgError.Code) alone, except inside a
// *pgconn.ConnectError, where any cause (authentication failed, database
// missing, too many connections) means no connection: unavailable.
func Classify(err error) Class {
	if err == nil {
		return ClassNone
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return ClassUnavailable
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return classifyCode(pe.Code)
	}
	if lostConnection(err) {
		return ClassUnavailable
	}
	return ClassInternal
}

// classifyCode is Classify for a SQLSTATE reported by the server.
func classifyCode(code string) Class {
	switch {
	case code == codeSerializationFailure || code == codeDeadlock:
		return ClassConflict
	case code == codeForeignKeyViolation:
		return ClassVanished
	case code == codeCharacterNotInRepertoire || code == codeUntranslatableCharacter:
		return ClassInvalidText
	case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "53"),
		code == "57P01", code == "57P02", code == "57P03", code == "57P04", code == "57P05",
		code == codeQueryCanceled, code == codeReadOnlyTransaction:
		return ClassUnavailable
	}
	return ClassInternal
}

// lostConnection reports an error that is not the server's answer but the
// lack of one: the context ended, a pgconn timeout, the connection or pool
// closed, or a network failure (EOF, reset, refused, broken pipe, any
// net.Error).
func lostConnection(err error) bool {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), pgconn.Timeout(err),
		errors.Is(err, pgconn.ErrConnClosed), errors.Is(err, puddle.ErrClosedPool),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE),
		errors.As(err, &ne):
		return true
	}
	return false
}

// IsUnavailable reports Classify(err) == ClassUnavailable.
func IsUnavailable(err error) bool { return Classify(err) == ClassUnavailable }

// OutageLevel is the level at which a background step (the dedup sweep, a
// retention pass) logs its failure err: debug when PostgreSQL is away, a
// retry during an outage that the projector's outage log reports
// (docs/operations.md, "Logs"); warn otherwise.
func OutageLevel(err error) slog.Level {
	if IsUnavailable(err) {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

// retryable reports a PostgreSQL error that a transaction may simply be
// run again for: a conflict (deadlock 40P01, serialization failure 40001)
// or, when vanished is set, a foreign-key violation (23503) left by a
// concurrent delete, which the rerun sees as gone.
func retryable(err error, vanished bool) bool {
	switch Classify(err) {
	case ClassConflict:
		return true
	case ClassVanished:
		return vanished
	}
	return false
}

// retryAttempts is how often withRetry runs a transaction at most.
const retryAttempts = 3

// withRetry runs fn up to retryAttempts times while it fails with a
// retryable error (see retryable; vanished as there), sleeping 5, 10 ms
// between attempts. fn must be a whole transaction (rolled back on error).
func withRetry(vanished bool, fn func() error) error {
	var err error
	for attempt := 0; attempt < retryAttempts; attempt++ {
		if err = fn(); err == nil || !retryable(err, vanished) {
			return err
		}
		if attempt < retryAttempts-1 {
			time.Sleep(time.Duration(attempt+1) * 5 * time.Millisecond)
		}
	}
	return err
}

package fastapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	json "github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/textcut"
	"github.com/queenmq/queen-go/pg"
)

// freeFormMembers are the members whose values are the client's data,
// kept byte for byte: a push item's payload (in a transaction) and a
// trace's data. Only they may hold lone surrogate escapes.
var freeFormMembers = []string{"payload", "data"}

// decodeObject decodes a JSON object body into v; errors are client
// mistakes with a message fit for {"error": ...}. A body that is not valid
// UTF-8 is refused whole, as the push route refuses it. A lone surrogate escape
// in any string outside freeFormMembers (a name, an id, a status) is
// refused, naming its field: decoders would silently make it U+FFFD
// (ingest.ErrLoneSurrogate).
func decodeObject(body []byte, v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.New("malformed JSON")
		}
	}()
	t := bytes.TrimSpace(body)
	if len(t) == 0 {
		return errors.New("empty request body")
	}
	if !utf8.Valid(t) {
		// Decoding would turn each invalid byte into U+FFFD: a name or id
		// that is not what the client sent (as /push refuses it).
		return errors.New("request body is not valid UTF-8")
	}
	if t[0] != '{' {
		if !json.Valid(t) {
			return errors.New("malformed JSON")
		}
		return errors.New("body must be a JSON object")
	}
	if err := json.Unmarshal(t, v); err != nil {
		if d, ok := ingest.JSONDepth(t); ok && d > ingest.MaxDepth {
			// Checked on failure only, so the common path pays nothing: the
			// decoder refuses a body nested past its own limit (about
			// 10,000 levels; /push refuses past 512), and this says so.
			return fmt.Errorf("JSON nested too deep (%d levels)", d)
		}
		if !json.Valid(t) {
			return errors.New("malformed JSON")
		}
		// Valid JSON of the wrong shape: name the field and what it needs.
		return shapeError(err)
	}
	if field, ok := ingest.FindLoneSurrogate(t, freeFormMembers...); ok {
		return fmt.Errorf("%s %w", field, ingest.ErrLoneSurrogate)
	}
	return nil
}

// readObject reads the request body and decodes it as a JSON object into
// v. On failure it has already answered (413 over the body limit, 400 for
// anything else) and returns false.
func (s *Server) readObject(ctx *fasthttp.RequestCtx, v any) bool {
	body, ok := s.readBodyOrAnswer(ctx)
	if !ok {
		return false
	}
	if err := decodeObject(body, v); err != nil {
		writeErr(ctx, fasthttp.StatusBadRequest, err.Error())
		return false
	}
	return true
}

// readEnabled reads {"enabled": bool} (the maintenance routes); false when
// it has answered 400/413.
func (s *Server) readEnabled(ctx *fasthttp.RequestCtx) (enabled, ok bool) {
	var req struct {
		Enabled *bool `json:"enabled"`
	}
	if !s.readObject(ctx, &req) {
		return false, false
	}
	if req.Enabled == nil {
		writeErr(ctx, fasthttp.StatusBadRequest, "\"enabled\" (boolean) is required")
		return false, false
	}
	return *req.Enabled, true
}

// MaxOptionMembers bounds the members of a /configure "options" object.
// The unknown ones are ignored, not refused, but each was collected,
// logged and echoed: 250,000 of them cost 16-22 s of CPU, a 105 MB answer
// and a 52 MB log line per request (a hostile-input probe). 256 leaves
// room for every option of newer Queen versions.
const MaxOptionMembers = 256

// knownOptions is how many option names optionFields maps.
var knownOptions = func() int { i, b := optionFields(new(pg.QueueOptions)); return len(i) + len(b) }()

// maxIgnoredShown and maxIgnoredName bound what a configure answers and
// logs of the unknown option names: the first (sorted) maxIgnoredShown,
// each cut to maxIgnoredName bytes.
const (
	maxIgnoredShown = 20
	maxIgnoredName  = 64
)

// shownIgnored returns the names of ignored to answer and log (see
// maxIgnoredShown).
func shownIgnored(ignored []string) []string {
	out := make([]string, 0, min(len(ignored), maxIgnoredShown))
	for _, n := range ignored[:min(len(ignored), maxIgnoredShown)] {
		if len(n) > maxIgnoredName {
			n = textcut.Prefix(n, maxIgnoredName) + "…"
		}
		out = append(out, n)
	}
	return out
}

// intOptions and boolOptions map Queen's option names to their field.
func optionFields(o *pg.QueueOptions) (map[string]*int, map[string]*bool) {
	return map[string]*int{
			"leaseTime": &o.LeaseTime, "retryLimit": &o.RetryLimit, "delayedProcessing": &o.DelayedProcessing,
			"windowBuffer": &o.WindowBuffer, "retentionSeconds": &o.RetentionSeconds,
			"completedRetentionSeconds": &o.CompletedRetentionSeconds, "maxWaitTimeSeconds": &o.MaxWaitTimeSeconds,
			"priority": &o.Priority, "maxSize": &o.MaxSize, "retryDelay": &o.RetryDelay, "ttl": &o.TTL,
			"dedupWindowSeconds": &o.DedupWindowSeconds,
		}, map[string]*bool{
			"retentionEnabled": &o.RetentionEnabled, "encryptionEnabled": &o.EncryptionEnabled,
			"deadLetterQueue": &o.DeadLetterQueue, "dlqAfterMaxRetries": &o.DLQAfterMaxRetries,
		}
}

// ParseQueueOptions applies a /configure "options" object over the
// defaults (a full replace: omitted options take their defaults). Integer
// options must be whole numbers in 0..2^31-1, boolean options booleans;
// an option given as JSON null takes its default, as an omitted one does
// (Queen's Go SDK sends null to mean "restore the default"; decoding it
// as 0 would, for example, turn dedup off). An option name this broker
// does not know is not an error (Queen's SDKs pass on whatever options
// object the user's code builds, and newer Queen options must not break
// a configure): it is returned in ignored, sorted, so the route can answer
// and log it (shownIgnored). More than MaxOptionMembers members is an
// error.
func ParseQueueOptions(raw map[string]json.RawMessage) (o pg.QueueOptions, ignored []string, err error) {
	o = pg.DefaultQueueOptions()
	if len(raw) > MaxOptionMembers {
		return o, nil, fmt.Errorf("options has %d members; at most %d are read (this broker knows %d options)",
			len(raw), MaxOptionMembers, knownOptions)
	}
	ints, bools := optionFields(&o)
	for name, v := range raw {
		_, isInt := ints[name]
		_, isBool := bools[name]
		if !isInt && !isBool {
			ignored = append(ignored, name)
			continue
		}
		if string(bytes.TrimSpace(v)) == "null" {
			continue
		}
		if p, ok := ints[name]; ok {
			var n int64
			if err := json.Unmarshal(v, &n); err != nil || n < 0 || n > 1<<31-1 {
				return o, nil, fmt.Errorf("options.%s must be a non-negative integer", name)
			}
			*p = int(n)
		} else if p, ok := bools[name]; ok {
			var b bool
			if err := json.Unmarshal(v, &b); err != nil {
				return o, nil, fmt.Errorf("options.%s must be a boolean", name)
			}
			*p = b
		}
	}
	sort.Strings(ignored)
	return o, ignored, nil
}

// Configurer stores a queue's options for POST /api/v1/configure
// (Deps.Configurer).
type Configurer interface {
	// Configure stores a queue's options (full replace), creating the
	// queue and its default partition when new. A nil namespace or task
	// keeps the queue's (a new queue's is derived from its name, as a
	// push derives it); "" clears it. The result holds what was stored.
	Configure(ctx context.Context, queue string, namespace, task *string, o pg.QueueOptions) (*pg.ConfigureResult, error)
}

func (s *Server) configure(ctx *fasthttp.RequestCtx) {
	var req struct {
		Queue     *string                    `json:"queue"`
		Namespace *string                    `json:"namespace"`
		Task      *string                    `json:"task"`
		Options   map[string]json.RawMessage `json:"options"`
	}
	if !s.readObject(ctx, &req) {
		return
	}
	if req.Queue == nil {
		writeErr(ctx, fasthttp.StatusBadRequest, "\"queue\" is required")
		return
	}
	if err := ingest.ValidateName(*req.Queue); err != nil {
		writeErr(ctx, fasthttp.StatusBadRequest, "queue "+err.Error())
		return
	}
	opts, ignored, err := ParseQueueOptions(req.Options)
	if err != nil {
		writeErr(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	// Absent (or null) namespace and task keep the queue's own: a configure
	// of options alone must not move a queue out of its namespace (the SDKs
	// send them only when the application set them).
	for _, v := range []*string{req.Namespace, req.Task} {
		if v != nil && *v != "" && ingest.ValidateName(*v) != nil {
			writeErr(ctx, fasthttp.StatusBadRequest, "namespace and task must be up to 255 bytes of UTF-8 without control characters")
			return
		}
	}
	c, cancel := s.dbCtx()
	defer cancel()
	res, err := s.deps.Configurer.Configure(c, *req.Queue, req.Namespace, req.Task, opts)
	if err != nil {
		s.dbFail(ctx, "configure of queue "+strconv.Quote(*req.Queue), err)
		return
	}
	out := map[string]any{
		"configured": true, "queueId": res.QueueID.String(), "partitionId": res.PartitionID.String(),
		"queue": *req.Queue, "namespace": res.Namespace, "task": res.Task, "options": res.Options,
	}
	if len(ignored) > 0 {
		// A typo (leaseTimee) is visible to the caller and in the log; the
		// options that are known were stored all the same.
		shown := shownIgnored(ignored)
		warning := "unknown options ignored: " + strings.Join(shown, ", ")
		if len(shown) < len(ignored) {
			warning += fmt.Sprintf(" (and %d more)", len(ignored)-len(shown))
		}
		s.log.Warn("configure: unknown options ignored", "queue", *req.Queue, "ignored", shown, "count", len(ignored))
		out["ignored"] = shown
		out["warning"] = warning
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
}

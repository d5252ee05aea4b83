package projector

import (
	"log/slog"
	"time"
)

// outageReminder is how often a PostgreSQL outage that goes on is logged
// again (with how long it has lasted), between the first and last line.
const outageReminder = 5 * time.Minute

// outageLog turns the projector's retries into a few log lines per
// PostgreSQL outage instead of one per retry:
//
//   - "PostgreSQL lost" (warn) at the first failed step, with the error;
//   - "PostgreSQL still unreachable" (warn) every outageReminder after that;
//   - "PostgreSQL is back" (info) at the first step that succeeds, with
//     how long it was away and the backlog then waiting;
//   - "caught up after the PostgreSQL outage" (info) once the records that
//     were waiting when it came back are projected, with how many records
//     were projected since it came back (new pushes included).
//
// Each retry in between is logged at debug level. An error that stops the
// projector (Stopped) is logged once per distinct error. It is used by the
// projection loop only (not safe for concurrent use).
type outageLog struct {
	log *slog.Logger
	now func() time.Time

	down        bool
	since       time.Time // first failure of the outage
	reminded    time.Time // last reminder (or since)
	stoppedMsg  string    // last logged stopping error
	catchingUp  bool
	backAt      time.Time
	backFrom    uint64 // checkpoint when PostgreSQL came back
	backBacklog uint64
}

// failed records a failed PostgreSQL step (err is not a stopping error).
func (o *outageLog) failed(err error, backoff time.Duration, backlog uint64) {
	now := o.now()
	o.catchingUp = false
	if !o.down {
		o.down, o.since, o.reminded = true, now, now
		o.log.Warn("projector: PostgreSQL lost; pushes are kept in the WAL and answered buffered, projection retries with backoff",
			"err", err, "backlog", backlog)
		return
	}
	if now.Sub(o.reminded) >= outageReminder {
		o.reminded = now
		o.log.Warn("projector: PostgreSQL still unreachable", "down_for", now.Sub(o.since).Round(time.Second),
			"err", err, "backlog", backlog)
		return
	}
	o.log.Debug("projector: PostgreSQL step failed; retrying", "err", err, "backoff", backoff)
}

// stopped records an error that keeps projection stopped (Stopped): msg is
// logged at error level once per distinct error.
func (o *outageLog) stopped(msg string, err error) {
	if err.Error() == o.stoppedMsg {
		o.log.Debug("projector: still stopped", "err", err)
		return
	}
	o.stoppedMsg = err.Error()
	o.log.Error(msg, "err", err)
}

// succeeded records a PostgreSQL step that succeeded, with the checkpoint
// and backlog after it.
func (o *outageLog) succeeded(checkpoint, backlog uint64) {
	now := o.now()
	o.stoppedMsg = ""
	if o.down {
		o.down = false
		o.catchingUp = true
		o.backAt, o.backFrom, o.backBacklog = now, checkpoint, backlog
		o.log.Info("projector: PostgreSQL is back", "down_for", now.Sub(o.since).Round(time.Millisecond),
			"backlog", backlog)
	}
	if o.catchingUp && checkpoint >= o.backFrom+o.backBacklog {
		o.catchingUp = false
		o.log.Info("projector: caught up after the PostgreSQL outage", "records_projected", checkpoint-o.backFrom,
			"took", now.Sub(o.backAt).Round(time.Millisecond))
	}
}

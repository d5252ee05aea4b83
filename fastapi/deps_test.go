package fastapi

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/pg"
)

// fullDeps sets every Deps field to a value of its interface type. Their
// methods are never called: New only checks that each is there. A field
// added to Deps and not set here makes TestNewAcceptsFullDeps fail.
func fullDeps() Deps {
	return Deps{
		Pusher:         struct{ Pusher }{},
		Configurer:     struct{ Configurer }{},
		Health:         struct{ HealthChecker }{},
		Maintenance:    struct{ MaintenanceControl }{},
		Consumer:       struct{ Consumer }{},
		FilteredPop:    struct{ FilteredPopper }{},
		Transactor:     struct{ Transactor }{},
		Resources:      struct{ Resources }{},
		Admin:          struct{ Admin }{},
		Messages:       struct{ MessageReader }{},
		Traces:         struct{ Tracer }{},
		Status:         struct{ StatusReader }{},
		Runtime:        struct{ StatusSource }{},
		Streams:        struct{ Streams }{},
		MessageDeleter: struct{ MessageDeleter }{},
		Pipeline:       struct{ PipelineReporter }{},
	}
}

func TestNewAcceptsFullDeps(t *testing.T) {
	t.Parallel()
	s, err := New(Config{}, fullDeps())
	if err != nil || s == nil {
		t.Fatalf("New(full Deps) = %v, %v; want a server", s, err)
	}
}

// TestNewRefusesMissingDependency clears each Deps field in turn: New must
// refuse at construction with ErrMissingDependency naming that field (and
// only it), so a route never finds its dependency absent at request time.
func TestNewRefusesMissingDependency(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeOf(Deps{})
	for i := 0; i < typ.NumField(); i++ {
		name := typ.Field(i).Name
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := fullDeps()
			reflect.ValueOf(&d).Elem().Field(i).SetZero()
			s, err := New(Config{}, d)
			if s != nil || !errors.Is(err, ErrMissingDependency) {
				t.Fatalf("New without %s = %v, %v; want ErrMissingDependency", name, s, err)
			}
			if !strings.HasSuffix(err.Error(), ": Deps."+name) {
				t.Fatalf("New without %s: error %q does not name exactly Deps.%s", name, err, name)
			}
		})
	}
}

// TestNewRefusesNilPointerDependency: a typed nil pointer in a field (a
// *pg.Store never opened) is as missing as a nil interface, and every
// missing field is named.
func TestNewRefusesNilPointerDependency(t *testing.T) {
	t.Parallel()
	d := fullDeps()
	d.Resources = (*pg.Store)(nil)
	d.Status = (*pg.Status)(nil)
	d.Traces = nil
	_, err := New(Config{}, d)
	if !errors.Is(err, ErrMissingDependency) {
		t.Fatalf("New = %v; want ErrMissingDependency", err)
	}
	if want := "Deps.Resources, Deps.Traces, Deps.Status"; !strings.HasSuffix(err.Error(), ": "+want) {
		t.Fatalf("error %q; want it to end with %q", err, want)
	}
}

// TestServerLimitsDefaults: a zero Config bounds connections at
// DefaultMaxConns and answer writes at DefaultWriteTimeout; a negative
// MaxConns takes fasthttp's default bound, and set values are kept; the
// listener applies the bound (headListener), fasthttp's own is above it.
func TestServerLimitsDefaults(t *testing.T) {
	for _, c := range []struct {
		cfg         Config
		conns       int
		writeWithin time.Duration
	}{
		{Config{}, DefaultMaxConns, DefaultWriteTimeout},
		{Config{MaxConns: -1, WriteTimeout: time.Second}, fasthttp.DefaultConcurrency, time.Second},
		{Config{MaxConns: 40}, 40, DefaultWriteTimeout},
	} {
		s, err := New(c.cfg, fullDeps())
		if err != nil {
			t.Fatal(err)
		}
		if s.cfg.MaxConns != c.conns || s.srv.Concurrency != c.conns+connLimitSlack || s.srv.WriteTimeout != c.writeWithin {
			t.Errorf("%+v: MaxConns %d, Concurrency %d, WriteTimeout %v; want %d, %d, %v", c.cfg, s.cfg.MaxConns, s.srv.Concurrency, s.srv.WriteTimeout,
				c.conns, c.conns+connLimitSlack, c.writeWithin)
		}
	}
}

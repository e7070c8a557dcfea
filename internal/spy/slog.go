package spy

import (
	"context"
	"log/slog"
	"sync"
)

// Log is a slog.Handler that keeps every record it is given, at every
// level: to check what a component logs, and how often. Attributes and
// groups added with Logger.With are dropped. Safe for concurrent use.
type Log struct{ kept[slog.Record] }

// Enabled reports true: every level is kept.
func (l *Log) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps r.
func (l *Log) Handle(_ context.Context, r slog.Record) error {
	l.keep(r.Clone())
	return nil
}

// WithAttrs returns l: the attributes are dropped.
func (l *Log) WithAttrs([]slog.Attr) slog.Handler { return l }

// WithGroup returns l: the group is dropped.
func (l *Log) WithGroup(string) slog.Handler { return l }

// kept is what a spy keeps: kept by one goroutine, taken by another.
type kept[T any] struct {
	mu    sync.Mutex
	items []T
}

func (k *kept[T]) keep(v T) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.items = append(k.items, v)
}

// Take returns what was kept since the last Take.
func (k *kept[T]) Take() []T {
	k.mu.Lock()
	defer k.mu.Unlock()
	items := k.items
	k.items = nil
	return items
}

// Attrs returns a record's attributes by key.
func Attrs(r slog.Record) map[string]slog.Value {
	m := map[string]slog.Value{}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value
		return true
	})
	return m
}

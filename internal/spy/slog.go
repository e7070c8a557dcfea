package spy

import (
	"context"
	"log/slog"
	"sync"
)

// Log is a slog.Handler that keeps every record it is given, at every
// level: to check what a component logs, and how often. Attributes and
// groups added with Logger.With are dropped. Safe for concurrent use.
type Log struct {
	mu      sync.Mutex
	records []slog.Record
}

// Enabled reports true: every level is kept.
func (l *Log) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps r.
func (l *Log) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}

// WithAttrs returns l: the attributes are dropped.
func (l *Log) WithAttrs([]slog.Attr) slog.Handler { return l }

// WithGroup returns l: the group is dropped.
func (l *Log) WithGroup(string) slog.Handler { return l }

// Take returns the records since the last Take.
func (l *Log) Take() []slog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.records
	l.records = nil
	return r
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

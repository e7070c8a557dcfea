package fleetlimit

import (
	"context"
	"log/slog"
	"time"
)

// SlogObserver returns an Observer that logs decisions to logger (nil:
// slog.Default()): degraded decisions at Warn, with the error, the policy,
// who decided and whether the breaker was open; denials at Info; admissions
// at Debug; a caller gone before its decision (DecidedByCaller) at Info.
// Each record carries name, route (when set), algorithm, key,
// n, allowed, remaining and latency; a partial grant (Event.AtMost) also
// granted, and a settle (Event.Settle) settle true and, when the debt cap
// cut the charge, cut. Levels the logger does not enable cost one Enabled
// call and no allocation.
//
// Keys are client identifiers (user ids, IP prefixes): mind your retention
// rules when logging admissions and denials.
func SlogObserver(logger *slog.Logger) Observer {
	if logger == nil {
		logger = slog.Default()
	}
	return slogObserver{logger}
}

type slogObserver struct{ log *slog.Logger }

func (o slogObserver) Observe(e Event) {
	level, msg := slog.LevelDebug, "rate limit: admitted"
	switch {
	case e.DecidedBy == DecidedByCaller:
		level, msg = slog.LevelInfo, "rate limit: caller gone, denied"
	case e.Degraded():
		level, msg = slog.LevelWarn, "rate limit: degraded decision, store unavailable"
	case e.Shadow:
		level, msg = slog.LevelInfo, "rate limit: denied (shadow: admitted)"
	case !e.Allowed:
		level, msg = slog.LevelInfo, "rate limit: denied"
	}
	ctx := context.Background()
	if !o.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 16)
	attrs = append(attrs, slog.String("name", e.Name))
	if e.Route != "" {
		attrs = append(attrs, slog.String("route", e.Route))
	}
	attrs = append(attrs,
		slog.String("algorithm", e.Algorithm),
		slog.String("key", e.Key),
		slog.Int64("n", e.N),
		slog.Bool("allowed", e.Allowed),
		slog.Int64("remaining", e.Remaining),
		slog.Duration("latency", e.Latency),
	)
	attrs = kindAttrs(attrs, e)
	if e.Degraded() {
		attrs = append(attrs,
			slog.String("error", e.Err.Error()),
			slog.String("policy", e.Policy.String()),
			slog.String("decided_by", e.DecidedBy.String()),
			slog.Bool("circuit_open", e.CircuitOpen),
		)
	}
	o.log.LogAttrs(ctx, level, msg, attrs...)
}

// kindAttrs appends to attrs what marks e as a shadow admission, a
// partial grant or a settle.
func kindAttrs(attrs []slog.Attr, e Event) []slog.Attr {
	if e.Shadow {
		attrs = append(attrs, slog.Bool("shadow", true))
	}
	if e.AtMost {
		attrs = append(attrs, slog.Int64("granted", e.Granted))
	}
	if e.Settle {
		attrs = append(attrs, slog.Bool("settle", true))
		if e.Cut > 0 {
			attrs = append(attrs, slog.Int64("cut", e.Cut))
		}
	}
	return attrs
}

// ObserveConflict logs a registry conflict (see ConflictObserver) at
// Error.
func (o slogObserver) ObserveConflict(c Conflict) { logConflict(o.log, c) }

// ObserveSkew logs a clock-skew report (see SkewObserver): at Warn when
// the limiter's clock is skewed from its store's, at Info when they agree
// again, with the name, the offset and the threshold.
func (o slogObserver) ObserveSkew(name string, offset time.Duration, skewed bool) {
	level, msg := slog.LevelInfo, "rate limit: limiter's clock agrees with its store's again"
	if skewed {
		level, msg = slog.LevelWarn, "rate limit: limiter's clock (WithClock) is skewed from its store's: instances deciding one key on different times bend its limit"
	}
	o.log.LogAttrs(context.Background(), level, msg, slog.String("name", name),
		slog.Duration("offset", offset), slog.Duration("threshold", skewThreshold))
}

package algorithm

import "time"

// Scaler is implemented by strategies that can build a copy of themselves
// with a share of their capacity: what one of divisor instances may admit on
// its own so that together they stay near the original limit. fleetlimit uses
// it for the in-process fallback that decides while the shared store is down
// (fleetlimit.WithFallback). The built-in strategies implement it; a
// custom strategy opts in by implementing it.
type Scaler interface {
	// Scaled returns a strategy of the same algorithm whose limit (burst,
	// and refill rate, for a token bucket) is divided by divisor, over the
	// same window. A limit is rounded down but never below 1; divisor <= 1
	// returns the strategy unchanged.
	Scaled(divisor int64) Strategy
}

// share is ⌊v/divisor⌋, at least 1.
func share(v, divisor int64) int64 { return max(1, v/divisor) }

// scaled is Scaled for s, the limit-window strategy that build makes from
// p: s itself when divisor <= 1, else build(share(limit, divisor), window).
func (p *limitWindow) scaled(s Strategy, divisor int64, build func(int64, time.Duration) Strategy) Strategy {
	if divisor <= 1 {
		return s
	}
	return build(share(p.limit, divisor), p.d)
}

// Scaled is SlidingWindowLog(max(1, limit/divisor), window).
func (s *slidingWindowLog) Scaled(divisor int64) Strategy {
	return s.scaled(s, divisor, SlidingWindowLog)
}

// Scaled is SlidingWindowCounter(max(1, limit/divisor), window).
func (s *slidingWindowCounter) Scaled(divisor int64) Strategy {
	return s.scaled(s, divisor, SlidingWindowCounter)
}

// Scaled is FixedWindow(max(1, limit/divisor), window).
func (s *fixedWindow) Scaled(divisor int64) Strategy {
	return s.scaled(s, divisor, FixedWindow)
}

// Scaled is Concurrency(max(1, limit/divisor), ttl): one instance's share
// of the slots, for the fallback (fleetlimit.WithFallback).
func (s *concurrency) Scaled(divisor int64) Strategy {
	return s.scaled(s, divisor, Concurrency)
}

// Scaled divides the burst (at least 1) and the rate exactly: rate tokens
// per period*divisor is rate/divisor per period without rounding (and the
// scaled bucket refills from empty in about the original's time). When
// period*divisor would exceed MaxWindow or exact arithmetic, the rate is
// rounded down instead (at least 1 per period).
func (s *tokenBucket) Scaled(divisor int64) Strategy {
	if divisor <= 1 {
		return s
	}
	burst := share(s.burst, divisor)
	if s.per <= MaxWindow/time.Duration(divisor) {
		if tb := TokenBucket(s.rate, s.per*time.Duration(divisor), burst); tb.Validate() == nil {
			return tb
		}
	}
	return TokenBucket(share(s.rate, divisor), s.per, burst)
}

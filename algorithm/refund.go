package algorithm

import "time"

// Refunder is implemented by strategies that can give back units a key was
// charged: fleetlimit.Limiter.Refund (a request that should not have
// counted) and anything else that returns unspent units, such as a lease.
// The built-in strategies implement it; a custom strategy that does not
// cannot be refunded, and the limiter says so with an error wrapping
// errors.ErrUnsupported.
//
// Refund gives back n >= 1 units to st at now, atomically with respect to
// Decide (the caller holds st's lock), and returns the key's standing after
// it: Allowed true (a refund is never refused), Limit, Remaining (the cost
// that could pass right after it) and ResetAfter (until full capacity) as a
// Decision reports them, RetryAfter 0. It must not do I/O or read a clock.
//
// The rule every implementation keeps: a refund never takes a key above
// full capacity, and gives back at most n units, so that in any interval
// the admitted cost minus the refunded cost obeys the strategy's bound (a
// refund cannot mint capacity). Refunding the key's latest admission, with
// no other request on the key in between, leaves the key exactly as if that
// admission had never been made (for timelines whose time never runs
// backwards). What else each built-in strategy does:
//
//   - TokenBucket: n tokens go back into the bucket, at most up to burst.
//   - SlidingWindowLog: the key's n newest live units are removed from the
//     log (fewer if it holds fewer).
//   - FixedWindow: the count of the window that holds now is lowered by n,
//     at most to 0. The key remembers only the window it last counted in,
//     so units are given back only while that window is the current one:
//     once the window has turned, the key's old count no longer limits
//     anything and the refund changes nothing.
//   - SlidingWindowCounter: units come off the current window's count
//     first, then off the previous window's, which still weighs in the
//     estimate: newest first, as the log does. A count two windows old
//     weighs nothing and is not touched.
//
// The Lua twin (Script with Refunds set) runs the same rule in the
// script's refund mode (see package scripts).
type Refunder interface {
	Refund(st State, now time.Time, n int64) (Decision, error)
}

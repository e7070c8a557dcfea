package fleetlimit

import (
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// WithPenalty puts the limiter's strategy in a penalty box (see
// algorithm.Penalize): a key denied after times within within is refused
// outright for ban, and on each later ban for twice as long as the one
// before, up to maxBan; a key that goes maxBan after its last ban without
// another starts again at ban. A request refused by a ban is not counted,
// charges nothing, and gets the ban's remaining time as RetryAfter (or the
// strategy's own wait, if longer). "Lock out an IP after 20 denials in a
// minute, for 5 minutes, then 10, 20, up to a day" is
// WithPenalty(20, time.Minute, 5*time.Minute, 24*time.Hour).
//
// The ban is checked and set in the same decision (one script on Redis,
// one lock in memory), in a key of its own beside the strategy's, which
// expires once nothing in it matters; Reset lifts a ban with the rest of the
// key's state. Tiers (WithStrategyFor) get the same penalty.
// With WithLeases, a lease round trip the strategy denies counts as a
// denial, and a banned key's round trip takes no lease (see WithLeases);
// with WithLeaseAhead, a lease taken ahead that the strategy denies is not
// counted, since no caller's request was denied.
// Invalid parameters (after < 1, durations outside algorithm.MinWindow to
// algorithm.MaxWindow, maxBan < ban) make New fail with ErrInvalidConfig.
func WithPenalty(after int64, within, ban, maxBan time.Duration) Option {
	return option(func(c *config) {
		c.penalty = &algorithm.Penalty{After: after, Within: within, Ban: ban, MaxBan: maxBan}
	})
}

// Package algorithm holds fleetlimit's rate-limiting strategies: each decision
// rule written once in plain Go (no I/O) with its Lua twin beside it in
// package scripts.
//
// A Strategy answers one question: may a request of cost n pass at time now,
// given this key's state? Stores execute that rule atomically — the in-process
// store (store.Memory) under a per-key lock with the Go rule, the Redis store
// (store.Redis) as one Lua script per decision — so a strategy never does I/O
// and never reads a clock: time is an argument.
//
// The built-in strategies trade accuracy for memory:
//
//	SlidingWindowLog  exact: at most limit in every interval of length window;
//	                  memory grows with the limit (one sorted-set member per
//	                  admitted unit).
//	TokenBucket       rate tokens refill per period, continuously, up to burst;
//	                  constant memory per key; decisions equal
//	                  golang.org/x/time/rate's Limiter.AllowN.
//	FixedWindow       the naive counter, windows aligned to the Unix epoch;
//	                  constant memory; lets 2*limit through around every window
//	                  edge. Kept so that the flaw can be shown and measured.
//	SlidingWindowCounter  two fixed-window counts weighted by the overlap;
//	                  constant memory; at most limit per aligned window and
//	                  under twice it in any window-long interval.
//
// One bounds how many at once, not how often:
//
//	Concurrency       at most limit permits held per key (Holder): taken
//	                  by an acquire, given back by the release of that
//	                  permit, or expiring ttl after its last acquire or
//	                  renew; one sorted-set member per held permit.
//
// And two that combine others, each still one script per decision:
//
//	All               several strategies at once, all or nothing: admitted
//	                  only when every member admits, and then charged to all
//	                  (with a Concurrency member, the slot held too).
//	Penalize          a penalty box around a strategy: a key denied too often
//	                  is banned, for doubling bans.
//
// Arithmetic is on integer microseconds and integer token units below 2^53,
// the largest integer a Lua number holds exactly, so the Go rule and its Lua
// twin agree to the microsecond. Constructors never panic; an invalid
// configuration is reported by Strategy.Validate (and by fleetlimit.New).
//
// A new algorithm plugs in by implementing Strategy (see the example); no
// store changes. Built-in and registered strategies are listed by Registry,
// which the property tests and the compare tool iterate over.
package algorithm

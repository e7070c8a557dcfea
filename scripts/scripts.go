// Package scripts embeds the Lua twins of fleetlimit's decision rules.
//
// Each file here is the Redis half of a rule whose Go half lives in package
// algorithm (sliding_window_log.lua beside algorithm/sliding_window_log.go and
// so on). The two are kept in agreement by property tests that run both on the
// same generated timelines; change one and you must change the other.
//
// Every script follows one calling convention, so that one Redis store runs
// them all:
//
//	KEYS[1]    the key that holds this user's state
//	ARGV[1]    now, in integer microseconds since the Unix epoch, or "" to
//	           read the Redis server's TIME (so app-server clocks cannot skew it)
//	ARGV[2]    n, the cost of this request (an integer >= 1)
//	ARGV[3..]  the strategy's own parameters (algorithm.Strategy.ScriptArgs)
//	ARGV[#ARGV]  the mode, appended only when it is not a decision:
//	  "peek"   (fleetlimit.Limiter.Peek) the script decides exactly as it
//	           otherwise would and writes nothing (no SET, ZADD,
//	           ZREMRANGEBYSCORE or PEXPIRE), so that the key's value and
//	           TTL are unchanged and the script also runs on a read-only
//	           replica;
//	  "refund" (fleetlimit.Limiter.Refund) the script gives back n units
//	           by the strategy's refund rule (algorithm.Refunder, written
//	           once in Go and once here) and returns the key's standing
//	           after it: allowed 1, remaining, retry_after_us 0,
//	           reset_after_us.
//	         No parameter of ours is "peek" or "refund", so without a mode
//	         the last argument never reads as one.
//
// or "lease", appended only for a lease (fleetlimit.WithLeases), after
// three more arguments: back_at, back and want (algorithm.LeaseTerms). The
// script first gives back units of an earlier lease taken at back_at where
// it can do so exactly, then takes up to want units by the fair share
// (algorithm.Leaser), and returns {granted, remaining, retry_after_us,
// reset_after_us, now}: granted 0 for a denial, now the time it judged at.
// A composite's lease returns {granted, now} and then four integers per
// member; a penalty box's, {mode, wait_us, granted, now} and then the
// inner decision's four (or four per member): they are read by the
// strategy (algorithm.LeaseReplier). A script that leases says so with
// algorithm.Script.Leases.
//
// or "ahead", in place of "lease" for a lease taken ahead
// (fleetlimit.WithLeaseAhead, algorithm.LeaseTerms.Ahead), after the same
// three arguments: the script leases as in its lease mode, but a lease it
// denies changes no state a denial would, since no caller's request was
// denied. Only a script whose state a denial changes needs the mode
// (penalty.lua, which would otherwise count the denial toward a ban); it
// says so with algorithm.Script.LeasesAhead, and any other is sent "lease".
//
// or "acquire", "release" or "renew", appended only for an operation on a
// permit (fleetlimit.Limiter.Acquire, Permit.Release, Permit.Renew; the
// store passes store.Request.Permit), after one more argument: the
// permit's identity (algorithm.PermitOp.ID). The script applies that
// operation as the strategy's Hold does (algorithm.Holder) and returns the
// four integers below. A script that does says so with
// algorithm.Script.Holds; concurrency.lua does.
//
// or "charge", appended only for a charge past the limit
// (fleetlimit.Reservation.Settle, for a cost above its estimate), after one
// more argument: the debt cap, in units past the limit (negative: the
// strategy's own limit). The script records n units whatever the limit, as
// many as the cap allows, as the strategy's Charge does (algorithm.Charger),
// and returns {1, remaining, cut, reset_after_us}: the third integer is the
// units the cap cut off (a charge never waits). A composite returns those
// four per member, a penalty box four of its own first. A script that
// charges says so with algorithm.Script.Charges; the built-ins do.
//
// or "atmost", appended only for a partial grant
// (fleetlimit.Limiter.AllowAtMost): the script admits the most of n that
// fits now, g (0 <= g <= n), as the strategy's AtMost does
// (algorithm.Granter): it decides a request of cost g, or of 1 when g is
// 0, and returns what a lease returns, with g as granted: {granted,
// remaining, retry_after_us, reset_after_us, now}; a composite's, {granted,
// now} and then four integers per member; a penalty box's, {mode, wait_us,
// granted, now} and then the inner decision's. A script that does says so
// with algorithm.Script.AtMost.
//
// and returns {allowed (1 or 0), remaining, retry_after_us, reset_after_us}.
// A composite (algorithm.All, all.lua) takes one key per member and returns
// those four for each member in turn; a penalty box (penalty.lua) returns
// four of its own before its inner script's.
// A script that honours a mode says so with algorithm.Script.Peeks or
// algorithm.Script.Refunds; one that does not (a custom strategy's, written
// before the mode) is never sent it.
// All arithmetic is on integers below 2^53, which a Lua number (a double)
// holds exactly; time is never a float of seconds.
package scripts

import "embed"

// files holds the scripts: preamble.lua and one file a script.
//
//go:embed *.lua
var files embed.FS

// withPreamble is the script in file name with preamble.lua before it: the
// preamble reads the calling convention's arguments, and defines the
// lease's fair share, for every script here. It panics if name is not a
// file here, which the functions below rule out.
func withPreamble(name string) string {
	return read("preamble.lua") + read(name)
}

// read is the text of the embedded file name.
func read(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic("scripts: " + err.Error())
	}
	return string(b)
}

// SlidingWindowLog returns the Lua twin of algorithm.SlidingWindowLog.
func SlidingWindowLog() string { return withPreamble("sliding_window_log.lua") }

// TokenBucket returns the Lua twin of algorithm.TokenBucket.
func TokenBucket() string { return withPreamble("token_bucket.lua") }

// FixedWindow returns the Lua twin of algorithm.FixedWindow.
func FixedWindow() string { return withPreamble("fixed_window.lua") }

// SlidingWindowCounter returns the Lua twin of algorithm.SlidingWindowCounter.
func SlidingWindowCounter() string { return withPreamble("sliding_window_counter.lua") }

// Concurrency returns the Lua twin of algorithm.Concurrency.
func Concurrency() string { return withPreamble("concurrency.lua") }

// All returns the driver of algorithm.All's script, which the composite
// completes with its members' scripts (see all.lua for how).
func All() string { return withPreamble("all.lua") }

// Penalty returns the driver of algorithm.Penalize's script, which the
// penalty box completes with its inner strategy's script (see penalty.lua).
func Penalty() string { return withPreamble("penalty.lua") }

-- Sliding-window log: the exact limiter. Twin of algorithm/sliding_window_log.go.
--
-- KEYS[1]  a sorted set with one member per admitted unit of cost, scored by
--          its admission time in microseconds.
-- ARGV[1]  now (integer microseconds since the Unix epoch) or "" for TIME
-- ARGV[2]  n, the cost of this request
-- ARGV[3]  limit, the most units admitted in any interval of length window
-- ARGV[4]  window, in microseconds
-- ARGV[#ARGV]  "peek" on a peek: decide, and write nothing; "refund" on a
--              refund: remove the n newest live units (below); "lease" on a
--              lease, after ARGV[#ARGV-3..#ARGV-1] = back_at, back, want:
--              remove up to back live units admitted at back_at (the
--              earlier lease's, and no others), then take a lease (below
--              and algorithm.Leaser); "atmost" on a partial grant: log
--              the most of n that the window has left (below)
--              "charge" after ARGV[#ARGV-1] = the debt cap: record n past
--              the limit, up to the cap (below and algorithm.Charger)
-- Returns {allowed, remaining, retry_after_us, reset_after_us}; a lease
-- or a partial grant returns {granted, remaining, retry_after_us,
-- reset_after_us, now}.
--
-- A unit admitted at t counts against [t, t+window) and is evicted once
-- now - window >= t. Denied requests are not recorded, so a client hammering
-- past the limit is not locked out once its old admissions age out.
--
-- Work: one script writes at most max_cost members and evicts at most
-- max_cost (see evict), whatever n and limit, so that no request can hold
-- Redis for long; only a refund removes up to n.
--
-- Out of memory: Redis refuses a command that may grow memory (ZADD, SET)
-- when it is over maxmemory, but only as a script's first write; once a
-- script has written, Redis lets it finish. So the first write of an
-- admission is its ZADD, and expired units are removed after it: a full
-- Redis (noeviction) refuses the admission with OOM before anything is
-- written, instead of letting the log grow past maxmemory. A denial only
-- removes expired units, which Redis allows when full, so it is still
-- answered exactly.
-- (key, peek, refund, lease, atmost, n and now: see preamble.lua)
local limit = ARGV[3] + 0
local window = ARGV[4] + 0
-- The largest cost admitted in one request or lent in one lease, whatever
-- the limit (algorithm.MaxLogCost): each unit is one member written below,
-- so this bounds the time one script takes. A larger cost is denied as one
-- above the limit is.
local max_cost = 10000

-- Time never runs backwards for one key: a caller whose clock is behind the
-- newest admission is judged at that admission's time. This stops a slow
-- clock from evicting early, and keeps member names unique (below).
local newest_at, newest_seq = nil, 0
local newest = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
if newest[2] then
  -- Members are "<residue>:<letter><seq>" (below); anything else was written
  -- by something else: say so rather than compute with it. A score in
  -- Redis's reply is always a number (inf and -inf too), but not always
  -- one of ours: a whole, nonnegative number of microseconds.
  local seq = string.match(newest[1], '^%d+:%l(%d+)$')
  newest_at = newest[2] + 0
  if not seq or newest_at ~= math.floor(newest_at) or newest_at < 0 then
    return redis.error_reply('WRONGTYPE ' .. key .. ' does not hold a sliding window log')
  end
  if newest_at > now then now = newest_at end
  if newest_at == now then
    -- Units admitted at this same instant number on from the newest one.
    newest_seq = seq + 0
  end
end

-- Units admitted at or before now - window have expired. Count the live
-- ones without writing: the removal comes after the admission's ZADD (see
-- the top).
local expired = string.format('%d', now - window)
local count = redis.call('ZCOUNT', key, '(' .. expired, '+inf')

-- evict removes expired units, the oldest first, at most max_cost of them:
-- a key whose units all left the window together is emptied over several
-- decisions, never by one that removes a whole limit's worth. Every lookup
-- here skips expired units (by score), so those left behind change no
-- decision, and the set never holds more than limit members: a decision
-- that leaves some behind removed max_cost and added at most max_cost.
-- The expired units are the lowest ranks. It does not grow memory, so a
-- full Redis still runs it.
local function evict()
  local stale = redis.call('ZCOUNT', key, '-inf', expired)
  if stale > 0 then
    redis.call('ZREMRANGEBYRANK', key, '0', string.format('%d', math.min(stale, max_cost) - 1))
  end
end

if refund then
  -- The expired units go (see evict), then the n newest live ones (the
  -- highest ranks: the highest scores, and among equal scores the highest
  -- seq, see the member names below), or all of them if there are fewer.
  -- Neither grows memory, so a full Redis still takes a refund. The key's
  -- TTL follows its new newest unit. A refund of every live unit leaves
  -- only expired ones: the key goes with UNLINK, which frees a large set
  -- off Redis's main thread.
  local k = math.min(n, count)
  if k == count then
    redis.call('UNLINK', key)
  else
    evict()
    if k > 0 then redis.call('ZREMRANGEBYRANK', key, string.format('%d', -k), '-1') end
  end
  count = count - k
  local reset = 0
  if count > 0 then
    local top = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
    reset = top[2] + window - now
    redis.call('PEXPIRE', key, string.format('%d', math.ceil(reset / 1000)))
  end
  return {1, math.max(0, limit - count), 0, reset}
end

-- A lease first gives back the earlier lease's unspent units: up to back
-- of the live units admitted at back_at (units of one instant are
-- interchangeable; newer ones were charged by other requests and are not
-- touched). They are only counted out here, and removed after the
-- admission's ZADD (by unlease), so that the ZADD stays the first write
-- (see the top).
local granted, back_at, returned = n, 0, 0

-- unlease removes the returned units: the last ones, in the set's order,
-- scored back_at, which have the highest seq of that instant (see the
-- member names below), so that its units stay numbered 1, 2, ... When
-- back_at is now, the admission's units, just added, are among them: units
-- of one instant are interchangeable. Expired units that evict left
-- behind rank below every live one and are counted by ZCOUNT as by the
-- ranks, so hi is the rank of the last unit scored back_at either way.
-- Neither command grows memory, so a full Redis still takes it.
--
-- handback is unlease when nothing is admitted: the key's TTL then follows
-- its newest unit left (an emptied set is gone). It returns that unit's
-- time, or nil.
--
-- Both are made only for a lease, which alone returns units (returned is
-- 0 otherwise), rather than on every decision.
local unlease, handback
if lease then
  unlease = function()
    if returned == 0 then return end
    local hi = redis.call('ZCOUNT', key, '-inf', string.format('%d', back_at)) - 1
    redis.call('ZREMRANGEBYRANK', key, string.format('%d', hi - returned + 1), string.format('%d', hi))
  end
  handback = function()
    unlease()
    local top = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
    if not top[2] then return nil end
    local at = top[2] + 0
    redis.call('PEXPIRE', key, string.format('%d', math.ceil((at + window - now) / 1000)))
    return at
  end
end

if lease then
  back_at = ARGV[#ARGV - 3] + 0
  local back = ARGV[#ARGV - 2] + 0
  if back > 0 and back_at > now - window then
    local at = string.format('%d', back_at)
    returned = math.min(back, redis.call('ZCOUNT', key, at, at))
  end
  count = count - returned
  local want = ARGV[#ARGV - 1] + 0
  local available = math.max(0, limit - count)
  if want == 0 then
    -- Only a hand-back (Close): admit nothing.
    evict()
    if returned > 0 then handback() end
    return {0, available, 0, 0, now}
  end
  -- The fair share: at most half of what the key has left, unless n alone
  -- needs more; never more than want (see algorithm.Leaser).
  granted = lease_units(n, math.min(limit, max_cost), available, math.min(want, max_cost))
  n = granted
end

-- A charge (algorithm.Charger) adds n units at now whatever the limit, as
-- many as keep the live units within limit + max_debt (ARGV[#ARGV-1],
-- negative: the limit), and at most max_cost; the reply's third integer is
-- the units cut off. Nothing to add: the expired units go, and the key's
-- standing is the reply.
local cut = 0
if charge then
  local max_debt = ARGV[#ARGV - 1] + 0
  if max_debt < 0 then max_debt = limit end
  local k = math.min(n, max_cost, math.max(0, limit + max_debt - count))
  cut, n = n - k, k
  if k == 0 then
    evict()
    local reset = 0
    if count > 0 then reset = newest_at + window - now end
    return {1, math.max(0, limit - count), cut, reset}
  end
end
if atmost then
  -- A partial grant (algorithm.Granter): the most of n the window has
  -- left, at most max_cost, decided as a request of that cost; none, as a
  -- request of 1, whose denial says when one unit leaves the window.
  granted = math.min(n, max_cost, math.max(0, limit - count))
  n = math.max(granted, 1)
end

-- n <= limit - count, not count + n <= limit: the sum of two doubles can
-- round (at a limit near 2^53), the difference cannot.
if charge or (n <= limit - count and n <= max_cost) then
  if peek then return {1, limit - count - n, 0, window} end
  -- Members are "<now mod 2*window>:<seq>". Two live members are less than
  -- one window apart, so different admission times never share a residue,
  -- and the residue keeps members short (memory is spent per unit). Units
  -- of one instant are numbered 1, 2, ... on from the newest such unit; seq
  -- is written with its digit count first ("a9" < "b10"), so that Redis's
  -- order of equal-score members (by bytes) puts the highest seq last, where
  -- ZRANGE -1 -1 above finds it. (Numbering from the count is not enough: an
  -- eviction by a later, denied request can shrink the count while units of
  -- the newest instant remain.)
  local stamp = string.format('%d', now)
  local prefix = string.format('%d:', now % (2 * window))
  local args = {}
  for i = 1, n do
    local seq = string.format('%d', newest_seq + i)
    args[#args + 1] = stamp
    args[#args + 1] = prefix .. string.char(96 + #seq) .. seq
    if #args >= 1000 then
      redis.call('ZADD', key, unpack(args))
      args = {}
    end
  end
  if #args > 0 then redis.call('ZADD', key, unpack(args)) end
  -- A new member may reuse the name of an expired one (same residue, two or
  -- more windows earlier): ZADD then moves it to now, which is the same as
  -- removing it and adding a new one.
  evict()
  if lease then unlease() end
  redis.call('PEXPIRE', key, string.format('%d', math.ceil(window / 1000)))
  if charge then return {1, math.max(0, limit - count - n), cut, window} end
  if lease or atmost then return {granted, limit - count - n, 0, window, now} end
  return {1, limit - count - n, 0, window}
end

-- Denied. The expired units go (except on a peek); the lookups below skip
-- them either way.
if not peek then evict() end
if returned > 0 then newest_at = handback() end

-- The key is full again once its newest unit leaves the window.
local reset = 0
if count > 0 then reset = newest_at + window - now end
local retry
if n > limit or n > max_cost then
  -- Never passable: say when the key is full again (or a whole window).
  retry = reset
  if retry == 0 then retry = window end
else
  -- The request fits once the oldest count+n-limit units have left.
  local k = count + n - limit - 1
  local kth = redis.call('ZRANGEBYSCORE', key, '(' .. expired, '+inf', 'WITHSCORES', 'LIMIT', string.format('%d', k), '1')
  retry = kth[2] + window - now
end
-- Remaining is never negative, even when a limiter with a larger limit
-- shares this key.
if lease or atmost then return {0, math.max(0, limit - count), retry, reset, now} end
return {0, math.max(0, limit - count), retry, reset}

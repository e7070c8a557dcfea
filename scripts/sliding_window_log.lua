-- Sliding-window log: the exact limiter. Twin of algorithm/sliding_window_log.go.
--
-- KEYS[1]  a sorted set with one member per admitted unit of cost, scored by
--          its admission time in microseconds.
-- ARGV[1]  now (integer microseconds since the Unix epoch) or "" for TIME
-- ARGV[2]  n, the cost of this request
-- ARGV[3]  limit, the most units admitted in any interval of length window
-- ARGV[4]  window, in microseconds
-- ARGV[#ARGV]  "peek" on a peek: decide, and write nothing; "refund" on a
--              refund: remove the n newest live units (below)
-- Returns {allowed, remaining, retry_after_us, reset_after_us}.
--
-- A unit admitted at t counts against [t, t+window) and is evicted once
-- now - window >= t. Denied requests are not recorded, so a client hammering
-- past the limit is not locked out once its old admissions age out.
--
-- Out of memory: Redis refuses a command that may grow memory (ZADD, SET)
-- when it is over maxmemory, but only as a script's first write; once a
-- script has written, Redis lets it finish. So the first write of an
-- admission is its ZADD, and expired units are removed after it: a full
-- Redis (noeviction) refuses the admission with OOM before anything is
-- written, instead of letting the log grow past maxmemory. A denial only
-- removes expired units, which Redis allows when full, so it is still
-- answered exactly.
local key = KEYS[1]
local peek = ARGV[#ARGV] == 'peek'
local refund = ARGV[#ARGV] == 'refund'
local n = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local window = tonumber(ARGV[4])
local now = tonumber(ARGV[1])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Time never runs backwards for one key: a caller whose clock is behind the
-- newest admission is judged at that admission's time. This stops a slow
-- clock from evicting early, and keeps member names unique (below).
local newest_at, newest_seq = nil, 0
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if newest[2] then
  -- Members are "<residue>:<letter><seq>" (below); anything else was written
  -- by something else: say so rather than compute with it.
  local seq = string.match(newest[1], '^%d+:%l(%d+)$')
  newest_at = tonumber(newest[2])
  if not seq or not newest_at or newest_at ~= math.floor(newest_at) or newest_at < 0 then
    return redis.error_reply('WRONGTYPE ' .. key .. ' does not hold a sliding window log')
  end
  if newest_at > now then now = newest_at end
  if newest_at == now then
    -- Units admitted at this same instant number on from the newest one.
    newest_seq = tonumber(seq)
  end
end

-- Units admitted at or before now - window have expired. Count the live
-- ones without writing: the removal comes after the admission's ZADD (see
-- the top).
local expired = string.format('%d', now - window)
local count = redis.call('ZCOUNT', key, '(' .. expired, '+inf')

if refund then
  -- The expired units go, then the n newest live ones (ZPOPMAX takes the
  -- highest scores, and among equal scores the highest seq: see the member
  -- names below), or all of them if there are fewer. Neither grows memory,
  -- so a full Redis still takes a refund. The key's TTL follows its new
  -- newest unit; an emptied set is gone.
  redis.call('ZREMRANGEBYSCORE', key, '-inf', expired)
  local k = math.min(n, count)
  if k > 0 then redis.call('ZPOPMAX', key, string.format('%d', k)) end
  count = count - k
  local reset = 0
  if count > 0 then
    local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    reset = tonumber(top[2]) + window - now
    redis.call('PEXPIRE', key, math.ceil(reset / 1000))
  end
  return {1, math.max(0, limit - count), 0, reset}
end

-- n <= limit - count, not count + n <= limit: the sum of two doubles can
-- round (at a limit near 2^53), the difference cannot.
if n <= limit - count then
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
  local prefix = string.format('%d', now % (2 * window)) .. ':'
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
  redis.call('ZREMRANGEBYSCORE', key, '-inf', expired)
  redis.call('PEXPIRE', key, math.ceil(window / 1000))
  return {1, limit - count - n, 0, window}
end

-- Denied. The expired units go (except on a peek); the lookups below skip
-- them either way.
if not peek then redis.call('ZREMRANGEBYSCORE', key, '-inf', expired) end

-- The key is full again once its newest unit leaves the window.
local reset = 0
if count > 0 then reset = newest_at + window - now end
local retry
if n > limit then
  -- Never passable: say when the key is full again (or a whole window).
  retry = reset
  if retry == 0 then retry = window end
else
  -- The request fits once the oldest count+n-limit units have left.
  local k = count + n - limit - 1
  local kth = redis.call('ZRANGEBYSCORE', key, '(' .. expired, '+inf', 'WITHSCORES', 'LIMIT', k, 1)
  retry = tonumber(kth[2]) + window - now
end
-- Remaining is never negative, even when a limiter with a larger limit
-- shares this key.
return {0, math.max(0, limit - count), retry, reset}

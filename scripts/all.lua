-- All: several strategies in one decision, all or nothing. Twin of
-- algorithm/all.go.
--
-- This is the driver; algorithm.All prepends its members' own scripts, each
-- wrapped as a function of (KEYS, ARGV), as
--   local member = {}
--   member[1] = function(KEYS, ARGV) <member 1's script> end
--   ...
-- so each member's rule is its own script, unchanged, run on its own key.
--
-- KEYS[i]  member i's key
-- ARGV[1]  now (integer microseconds since the Unix epoch) or "" for TIME
-- ARGV[2]  n, the cost of this request
-- ARGV[3..] for each member in order: c (the count of its own parameters),
--          probe (a cost above its limit), then its c parameters
-- ARGV[#ARGV]  "peek" on a peek: decide, and write nothing; "refund" on a
--              refund: every member gives back n (each was charged n for
--              every admission) by its own refund rule
-- Returns, for each member in order, {allowed, remaining, retry_after_us,
-- reset_after_us}; algorithm.All combines them into the decision.
--
-- Every member first decides with its peek flag, which writes nothing. Only
-- when every member admits does each decide again for real, and charge: a
-- denial charges no member. A member that would have admitted a denied
-- request reports its figures as they are, uncharged: its decision on the
-- probe (a cost it can never admit, so it records nothing and reports the
-- key as it is), with allowed 1 and no wait.
--
-- Time is read once, so that every member decides at the same instant.
-- Out of memory: the first write is the first member's, which a Redis over
-- maxmemory refuses before anything is written (see token_bucket.lua).
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))
end
local n = ARGV[2]
local peek = ARGV[#ARGV] == 'peek'
local refund = ARGV[#ARGV] == 'refund'

local args, probes = {}, {}
local i = 3
for m = 1, #member do
  local c = tonumber(ARGV[i])
  probes[m] = ARGV[i + 1]
  local a = {now, n}
  for j = 1, c do a[2 + j] = ARGV[i + 1 + j] end
  args[m] = a
  i = i + 2 + c
end

-- call runs member m with cost (its own parameters after it) and, when
-- given, a mode ('peek' or 'refund').
local function call(m, cost, mode)
  local a = {}
  for j = 1, #args[m] do a[j] = args[m][j] end
  a[2] = cost
  if mode then a[#a + 1] = mode end
  return member[m]({KEYS[m]}, a)
end

local replies = {}
if refund then
  local out = {}
  for m = 1, #member do
    local r = call(m, n, 'refund')
    if r.err then return r end
    for j = 1, 4 do out[#out + 1] = r[j] end
  end
  return out
end

local admit = true
for m = 1, #member do
  local r = call(m, n, 'peek')
  if r.err then return r end
  replies[m] = r
  if r[1] ~= 1 then admit = false end
end

if admit and not peek then
  for m = 1, #member do
    local r = call(m, n)
    if r.err then return r end
    replies[m] = r
  end
elseif not admit then
  for m = 1, #member do
    if replies[m][1] == 1 then
      local r = call(m, probes[m], 'peek')
      if r.err then return r end
      replies[m] = {1, r[2], 0, r[4]}
    end
  end
end

local out = {}
for m = 1, #member do
  for j = 1, 4 do out[#out + 1] = replies[m][j] end
end
return out

package compare

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// storedKey is what one key holds, as read back through the Redis protocol:
// enough to compute the memory Redis spends on it.
type storedKey struct {
	name    string
	kind    string // "string" or "zset"; "none" when the key does not exist
	value   string // kind "string"
	members []redis.Z
}

// readKey reads key's type and contents with TYPE, GET or ZRANGE.
func readKey(ctx context.Context, c redis.Cmdable, key string) (storedKey, error) {
	k := storedKey{name: key}
	kind, err := c.Type(ctx, key).Result()
	if err != nil {
		return k, fmt.Errorf("compare: TYPE %s: %w", key, err)
	}
	k.kind = kind
	switch kind {
	case "none":
	case "string":
		if k.value, err = c.Get(ctx, key).Result(); err != nil {
			return k, fmt.Errorf("compare: GET %s: %w", key, err)
		}
	case "zset":
		if k.members, err = c.ZRangeWithScores(ctx, key, 0, -1).Result(); err != nil {
			return k, fmt.Errorf("compare: ZRANGE %s: %w", key, err)
		}
	default:
		return k, fmt.Errorf("compare: %s is a %s, which the memory model does not cover", key, kind)
	}
	return k, nil
}

// errNoModel is returned for a value the memory model does not cover.
var errNoModel = errors.New("compare: no memory model for this value")

// Redis 7.x's thresholds and structure sizes on a 64-bit build, from its
// source (server.h, dict.h, t_zset.c, listpack.c); defaults of
// redis.conf.
const (
	robjSize            = 16  // struct redisObject
	dictEntrySize       = 24  // struct dictEntry: key, value, next
	dictSize            = 56  // struct dict (7.0): type, two tables, used, rehash state
	zsetSize            = 16  // struct zset: dict and skiplist pointers
	zskiplistSize       = 32  // struct zskiplist: header, tail, length, level
	zslNodeBase         = 24  // struct zskiplistNode without its levels: ele, score, backward
	zslLevelSize        = 16  // one level: forward pointer and span
	zslMaxLevel         = 32  // ZSKIPLIST_MAXLEVEL: the header node has every level
	zslP                = .25 // ZSKIPLIST_P: a node has level k+1 with probability P^k(1-P)
	embstrMax           = 44  // OBJ_ENCODING_EMBSTR_SIZE_LIMIT
	zsetListpackEntries = 128 // zset-max-listpack-entries
	zsetListpackValue   = 64  // zset-max-listpack-value
)

// modelMemoryUsage returns what Redis 7.x with jemalloc reports as MEMORY
// USAGE key SAMPLES 0 for k on a standalone server (a Cluster node adds 16
// bytes per key for its slot index): the key's name (an sds), its entry in
// the keyspace dictionary, its object, and the object's value. Like MEMORY
// USAGE it leaves out the key's entry in the expiry dictionary, the
// dictionaries' bucket arrays, and allocator fragmentation.
//
// The value's encoding follows Redis's rules: a string is an integer (no
// allocation beyond the object) when it reads as one within 20 characters,
// embedded in its object up to 44 bytes, and a separate sds past that; a
// sorted set is one listpack up to 128 members of at most 64 bytes, and a
// skiplist with a dictionary past that, whose nodes have random heights:
// the model uses their expected size. Allocations are rounded up to
// jemalloc's size classes with the default 16-byte quantum, as in Debian's
// redis-server (Redis's own build configures an 8-byte quantum, which saves
// up to 8 bytes on some allocations). It is an estimate for the embedded miniredis,
// which holds the same values but does not model memory; a test holds it
// within 10% of a real server's MEMORY USAGE.
func modelMemoryUsage(k storedKey) (float64, error) {
	base := float64(sdsAlloc(len(k.name), true) + dictEntrySize)
	switch k.kind {
	case "string":
		return base + float64(stringObject(k.value)), nil
	case "zset":
		return base + zsetObject(k.members), nil
	}
	return 0, fmt.Errorf("%w: %s is a %s", errNoModel, k.name, k.kind)
}

// stringObject is the memory of a string object holding v.
func stringObject(v string) int64 {
	if _, ok := canonicalInt(v); ok {
		return robjSize // OBJ_ENCODING_INT: the value lives in the pointer
	}
	if len(v) <= embstrMax {
		// The object and an sdshdr8 in one allocation.
		return jemallocSize(robjSize + 3 + int64(len(v)) + 1)
	}
	return robjSize + sdsAlloc(len(v), false)
}

// canonicalInt parses s as Redis does when it encodes a value as an
// integer: a 64-bit integer written as strconv writes it (no sign but a
// leading "-", no leading zeros).
func canonicalInt(s string) (int64, bool) {
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil && strconv.FormatInt(v, 10) == s
}

// sdsAlloc is the allocation of an sds string of n bytes. Keys and set
// members are copied with sdsnewlen, which picks the smallest header (one
// byte below 32 bytes); other strings start with an 8-bit-length header.
func sdsAlloc(n int, copied bool) int64 {
	header := int64(3)
	switch {
	case copied && n < 32:
		header = 1
	case n >= 1<<8 && n < 1<<16:
		header = 5
	case n >= 1<<16:
		header = 9
	}
	return jemallocSize(header + int64(n) + 1)
}

// zsetObject is the memory of a sorted set holding members.
func zsetObject(members []redis.Z) float64 {
	longest := 0
	for _, m := range members {
		longest = max(longest, len(fmt.Sprint(m.Member)))
	}
	if len(members) <= zsetListpackEntries && longest <= zsetListpackValue {
		return float64(robjSize + jemallocSize(listpackBytes(members)))
	}
	n := int64(len(members))
	fixed := robjSize + zsetSize + zskiplistSize + dictSize + 8*dictSlots(n) +
		jemallocSize(zslNodeBase+zslLevelSize*zslMaxLevel)
	var perMember float64
	for _, m := range members {
		perMember += float64(sdsAlloc(len(fmt.Sprint(m.Member)), true) + dictEntrySize)
	}
	return float64(fixed) + perMember + float64(n)*expectedNodeSize()
}

// dictSlots is the bucket count of a dictionary that grew to n entries: the
// next power of two, at least 4 (dict.c expands when full).
func dictSlots(n int64) int64 {
	if n <= 4 {
		return 4
	}
	return 1 << bits.Len64(uint64(n-1))
}

// expectedNodeSize is the mean allocation of a skiplist node over the
// distribution of its level.
func expectedNodeSize() float64 {
	var mean float64
	p := 1 - zslP
	for level := int64(1); level <= zslMaxLevel; level++ {
		mean += p * float64(jemallocSize(zslNodeBase+zslLevelSize*level))
		p *= zslP
	}
	return mean
}

// listpackBytes is the size of a listpack holding each member and its score
// (listpack.c): a 6-byte header, the entries, a terminator.
func listpackBytes(members []redis.Z) int64 {
	size := int64(7)
	for _, m := range members {
		size += listpackEntry(fmt.Sprint(m.Member))
		size += listpackEntry(strconv.FormatFloat(m.Score, 'f', -1, 64))
	}
	return size
}

// listpackEntry is one listpack entry holding s: encoding, data, and the
// back-length that lets the list be walked backwards. A string that reads
// as a 64-bit integer is stored as one.
func listpackEntry(s string) int64 {
	var n int64
	if v, ok := canonicalInt(s); ok {
		switch {
		case v >= 0 && v <= 127:
			n = 1
		case v >= -4096 && v <= 4095:
			n = 2
		case v >= math.MinInt16 && v <= math.MaxInt16:
			n = 3
		case v >= -1<<23 && v < 1<<23:
			n = 4
		case v >= math.MinInt32 && v <= math.MaxInt32:
			n = 5
		default:
			n = 9
		}
	} else {
		l := int64(len(s))
		switch {
		case l < 64:
			n = 1 + l
		case l < 4096:
			n = 2 + l
		default:
			n = 5 + l
		}
	}
	back := int64(1)
	for limit := int64(127); n > limit; limit = limit<<7 | 127 {
		back++
	}
	return n + back
}

// jemallocSize rounds an allocation of n bytes up to jemalloc's size class
// with its default 16-byte quantum on x86-64: 8, then multiples of 16 up to
// 128, then four classes per doubling (160, 192, 224, 256, 320, ...).
func jemallocSize(n int64) int64 {
	if n <= 8 {
		return 8
	}
	step := int64(16)
	if n > 128 {
		step = int64(1) << (bits.Len64(uint64(n-1)) - 3)
	}
	return (n + step - 1) / step * step
}

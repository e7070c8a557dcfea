package store_test

import (
	"strings"
	"testing"

	"github.com/fleetlimit/fleetlimit/store"
)

// FuzzRedisKey: store.RedisKey maps user keys one-to-one, and the Redis
// Cluster hash tag (the text between the first '{' and the next '}') is
// exactly the escaped user key, never empty for a non-empty key, so any
// key's state stays in one slot and no key can pick another's.
func FuzzRedisKey(f *testing.F) {
	for _, k := range [][2]string{{"a", "b"}, {"{", "%7B"}, {"}", "%7D"}, {"%", "%25"}, {"}{", "%7D%7B"}, {"", "{}"}, {"a}b", "a%7Db"}} {
		f.Add(k[0], k[1])
	}
	const prefix, tag = "ratelimit:", "sl"
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := store.RedisKey(prefix, a, tag), store.RedisKey(prefix, b, tag)
		if (a == b) != (ka == kb) {
			t.Fatalf("RedisKey(%q) = %q, RedisKey(%q) = %q: not one-to-one", a, ka, b, kb)
		}
		open := strings.IndexByte(ka, '{')
		shut := strings.IndexByte(ka[open+1:], '}')
		if open != len(prefix) || shut < 0 {
			t.Fatalf("RedisKey(%q) = %q: no hash tag after the prefix", a, ka)
		}
		hashTag := ka[open+1 : open+1+shut]
		if a != "" && hashTag == "" {
			t.Fatalf("RedisKey(%q) = %q: empty hash tag, Redis Cluster would hash the whole name", a, ka)
		}
		if ka != prefix+"{"+hashTag+"}:"+tag {
			t.Fatalf("RedisKey(%q) = %q: the user key leaks out of its hash tag %q", a, ka, hashTag)
		}
		unescaped := strings.NewReplacer("%7B", "{", "%7D", "}", "%25", "%").Replace(hashTag)
		if unescaped != a {
			t.Fatalf("RedisKey(%q) = %q: its hash tag decodes to %q", a, ka, unescaped)
		}
	})
}

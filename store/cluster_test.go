package store_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
	"github.com/fleetlimit/fleetlimit/store/storetest"
)

// The conformance suite on a real 3-master Redis Cluster, through
// redis.NewClusterClient.
func TestRedisClusterConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return stores.Redis(t, redistest.Cluster(t)) })
}

// Keys with braces of their own never raise CROSSSLOT or land in a slot
// other than their hash tag's: every decision succeeds, each key is limited
// on its own, and Redis itself (CLUSTER KEYSLOT) hashes the full key exactly
// as the escaped user key. 60 plain keys spread over all three masters.
func TestRedisClusterBraceKeys(t *testing.T) {
	c := redistest.Cluster(t)
	s := stores.Redis(t, c)
	defer s.Close()
	p := redistest.Prefix()
	keys := []string{"{a}", "}{", "{}", "{", "}", "a{b}c", "{a}b", "}}{{", "%7B", "{user:1}:x"}
	for i := range 60 {
		keys = append(keys, fmt.Sprint("user:", i))
	}
	for _, strat := range strategies() { // limit 3
		for _, k := range keys {
			req := store.Request{Strategy: strat, Prefix: p, Key: k, N: 1, Now: storetest.T0}
			for i := range 4 {
				d, err := s.Decide(ctx, req)
				require.NoError(t, err, "%s %q", strat.Name(), k)
				require.Equal(t, i < 3, d.Allowed, "%s %q request %d", strat.Name(), k, i)
			}
			full := key(p, strat, k)
			tag := strings.TrimSuffix(strings.TrimPrefix(full, p+"{"), "}:"+strat.Script().Tag)
			require.Equal(t, c.ClusterKeySlot(ctx, tag).Val(), c.ClusterKeySlot(ctx, full).Val(), "%q: slot of its tag %q", k, tag)
			require.EqualValues(t, 1, c.Exists(ctx, full).Val(), "%q", k)
		}
	}
	require.Len(t, redistest.KeysByNode(t, c, p+"*"), 3, "keys on every master")
}

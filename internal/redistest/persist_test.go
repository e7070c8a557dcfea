package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/internal/redistest"
)

func TestScriptKeys(t *testing.T) {
	require.Equal(t, []string{"a", "b"}, redistest.ScriptKeys([]any{"EVALSHA", "sha", 2, "a", "b", "x"}))
	require.Equal(t, []string{"a"}, redistest.ScriptKeys([]any{"eval_ro", "src", "1", "a"}))
	require.Empty(t, redistest.ScriptKeys([]any{"eval", "src", 0, "x"}))
	require.Nil(t, redistest.ScriptKeys([]any{"set", "a", "b"}))
	require.Nil(t, redistest.ScriptKeys([]any{"eval", "src", 3, "a"}), "fewer keys than it says")
}

// TestPersistScriptKeys: on the real server, a script that sets a key to
// expire in 50 ms, sent alone and in a pipeline through a client with
// PersistScriptKeys, leaves the key without an expiry (it is still there
// 150 ms later); through a client without it, the key expires.
func TestPersistScriptKeys(t *testing.T) {
	if !redistest.HaveReal(t) {
		t.Skip("no real server: run under ./test.sh")
	}
	ctx := context.Background()
	const src = "redis.call('SET', KEYS[1], 'v', 'PX', 50) return 1"
	for _, persist := range []bool{true, false} {
		c := redistest.Real(t)
		if persist {
			redistest.PersistScriptKeys(c)
		}
		p := redistest.Prefix()
		require.NoError(t, c.Eval(ctx, src, []string{p + "alone"}).Err())
		_, err := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.Eval(ctx, src, []string{p + "piped"})
			return nil
		})
		require.NoError(t, err)
		time.Sleep(150 * time.Millisecond)
		n, err := c.Exists(ctx, p+"alone", p+"piped").Result()
		require.NoError(t, err)
		if persist {
			require.EqualValues(t, 2, n, "with PersistScriptKeys both keys are kept")
		} else {
			require.EqualValues(t, 0, n, "without it both expire in real time")
		}
	}
}

package redistest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/internal/redistest"
)

func TestServerKillRestart(t *testing.T) {
	ctx := context.Background()
	for _, bin := range redistest.Binaries {
		t.Run(bin, func(t *testing.T) {
			s := redistest.StartServerOf(t, bin)
			c := s.Client()
			require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
			info, err := c.Info(ctx, "server").Result()
			require.NoError(t, err)
			if bin == "valkey-server" {
				require.Contains(t, info, "server_name:valkey", "the program started is the one asked for")
			} else {
				require.NotContains(t, info, "server_name:valkey", "the program started is the one asked for")
			}
			s.Kill()
			require.Error(t, c.Ping(ctx).Err())
			s.Start()
			require.NoError(t, c.Ping(ctx).Err())
			require.Zero(t, c.Exists(ctx, "k").Val(), "a killed server loses its data")
			s.Restart()
			require.NoError(t, c.Ping(ctx).Err())
		})
	}
}

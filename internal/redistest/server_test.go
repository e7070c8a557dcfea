package redistest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/internal/redistest"
)

func TestServerKillRestart(t *testing.T) {
	ctx := context.Background()
	s := redistest.StartServer(t)
	c := s.Client()
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	s.Kill()
	require.Error(t, c.Ping(ctx).Err())
	s.Start()
	require.NoError(t, c.Ping(ctx).Err())
	require.Zero(t, c.Exists(ctx, "k").Val(), "a killed server loses its data")
	s.Restart()
	require.NoError(t, c.Ping(ctx).Err())
}

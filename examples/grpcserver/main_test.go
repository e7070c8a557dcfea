package main

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
)

// The server answers the demo client as its doc says: Check 5 times per
// client IP, then ResourceExhausted with the exact wait; Watch in bursts
// of 2 per user.
func TestDemo(t *testing.T) {
	mr, c := redistest.Mini(t)
	mr.SetTime(proptest.Epoch.Add(30 * time.Second)) // Redis TIME stands still: no refill mid-test
	srv, err := newServer(stores.Redis(t, c), fleetlimit.WithTimeout(5*time.Second))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	var out strings.Builder
	require.NoError(t, runDemo(&out, ln.Addr().String()))
	var lines []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "  ") {
			lines = append(lines, strings.Join(strings.Fields(l), " "))
		}
	}
	require.Equal(t, []string{
		`OK ratelimit: "check";r=4;t=60`,
		`OK ratelimit: "check";r=3;t=60`,
		`OK ratelimit: "check";r=2;t=60`,
		`OK ratelimit: "check";r=1;t=60`,
		`OK ratelimit: "check";r=0;t=60`,
		`ResourceExhausted retry in 1m0s ratelimit: "check";r=0;t=60`,
		`OK ratelimit: "watch";r=1;t=1`,
		`OK ratelimit: "watch";r=0;t=2`,
		`ResourceExhausted retry in 1s ratelimit: "watch";r=0;t=1`,
	}, lines, out.String())
}

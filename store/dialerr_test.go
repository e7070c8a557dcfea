package store_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// closedAddr returns a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// decideOnce makes one decision with a 200ms timeout: for the decisions
// expected to fail.
func decideOnce(s *store.Redis) error { return decideWithin(s, 200*time.Millisecond) }

// decideWithin makes one decision with the given timeout: generous for the
// decisions expected to succeed, which may dial on a loaded machine.
func decideWithin(s *store.Redis, timeout time.Duration) error {
	_, err := s.Decide(context.Background(), store.Request{Strategy: algorithm.FixedWindow(1, time.Minute), Prefix: redistest.Prefix(), Key: "u", N: 1, Timeout: timeout})
	return err
}

// A decision that fails because no connection can be opened wraps the
// dial's error, not only the deadline that go-redis's dial retries end in:
// against a closed port, on a client and a cluster client, the message says
// "connection refused" and errors.Is finds syscall.ECONNREFUSED; the error
// still wraps ErrUnavailable.
func TestDecisionWrapsTheDialError(t *testing.T) {
	addr := closedAddr(t)
	for name, c := range map[string]redis.UniversalClient{
		"client":  redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}),
		"cluster": redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, ContextTimeoutEnabled: true}),
	} {
		t.Cleanup(func() { _ = c.Close() })
		s := stores.Redis(t, c)
		for range 2 { // the first decision dials; so does the second
			err := decideOnce(s)
			require.ErrorIs(t, err, store.ErrUnavailable, name)
			require.ErrorContains(t, err, "connection refused", name)
			require.ErrorIs(t, err, syscall.ECONNREFUSED, name)
		}
	}
}

// A TLS client facing a server whose certificate it does not trust (a
// self-signed one): the decision's error carries the handshake's
// verification error, for errors.As.
func TestDecisionWrapsTheTLSError(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "https://")
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, TLSConfig: &tls.Config{ServerName: "example.com"}})
	t.Cleanup(func() { _ = c.Close() })
	s := stores.Redis(t, c)
	// The default dialer's handshake ignores the decision's deadline: on a
	// loaded machine the first decision may end before its handshake
	// fails, and then a later one carries the error.
	var err error
	var verr *tls.CertificateVerificationError
	require.Eventually(t, func() bool {
		err = decideOnce(s)
		return errors.As(err, &verr)
	}, 10*time.Second, time.Millisecond, "the TLS handshake's error is in the chain: %v", err)
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.ErrorContains(t, err, "certificate")
}

// Once a dial succeeds the old dial error is forgotten: a later deadline
// on a server that answers too slowly (DEBUG SLEEP) reads as a deadline,
// without the refusal of the server's earlier absence.
func TestDialErrorIsForgottenOnceADialSucceeds(t *testing.T) {
	srv := redistest.StartServer(t, "--enable-debug-command", "yes")
	admin, c := srv.Client(), srv.Client()
	s := stores.Redis(t, c)
	srv.Kill()
	require.ErrorIs(t, decideOnce(s), syscall.ECONNREFUSED)
	srv.Start()
	require.NoError(t, decideWithin(s, 10*time.Second))

	slept := make(chan error, 1)
	// Long enough for the probe and the decision below on a loaded machine.
	go func() { slept <- admin.Do(context.Background(), "DEBUG", "SLEEP", "2").Err() }()
	// Wait until the server is asleep: a PING on a fresh connection times out.
	require.Eventually(t, func() bool {
		probe := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		defer probe.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		return probe.Ping(ctx).Err() != nil
	}, 5*time.Second, 10*time.Millisecond)
	err := decideOnce(s)
	require.NoError(t, <-slept)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, syscall.ECONNREFUSED)
	require.NotContains(t, err.Error(), "refused")
}

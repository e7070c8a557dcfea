package store

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// dialErrors is a go-redis dial hook that remembers, per address, the error
// of the last dial that failed there, and forgets it when a dial to that
// address succeeds. go-redis retries a failing dial until the caller's
// deadline, whose error then hides the cause; with this record a decision
// that fails while no connection can be opened says why ("connection
// refused", "no such host", a TLS handshake's error — the default go-redis
// dialer does the handshake inside the dial).
//
// A dial cut short by its own context (an error of the context's, or a
// timeout once the context is done) is not recorded: that is the caller's
// deadline, not the server's answer. A dial that outlives its context and
// then fails on its own (a TLS handshake, which the default dialer does
// without the context) is recorded.
//
// dialErrors is safe for concurrent use.
type dialErrors struct {
	mu   sync.Mutex
	errs map[string]error // by address: the last dial's error, since the last success
}

var _ redis.Hook = (*dialErrors)(nil)

// watchDials installs a dialErrors on client and returns it: on a Cluster or
// Ring client (recognised by OnNewNode) on every node client it creates
// from now on, on any other go-redis client on the client itself. It
// returns nil, and installs nothing, for a client that is neither.
func watchDials(client redis.UniversalClient) *dialErrors {
	d := &dialErrors{errs: map[string]error{}}
	switch c := client.(type) {
	case interface{ OnNewNode(func(*redis.Client)) }:
		c.OnNewNode(func(node *redis.Client) { node.AddHook(d) })
	case interface{ Options() *redis.Options }:
		client.AddHook(d)
	default:
		return nil
	}
	return d
}

func (d *dialErrors) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil && ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || isNetTimeout(err)) {
			return conn, err
		}
		d.mu.Lock()
		if err != nil {
			d.errs[addr] = err
		} else {
			delete(d.errs, addr)
		}
		d.mu.Unlock()
		return conn, err
	}
}

func (d *dialErrors) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (d *dialErrors) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// failing returns the errors of the addresses whose last dial failed, in
// address order, joined; nil when every last dial succeeded (or d is nil).
func (d *dialErrors) failing() error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	addrs := make([]string, 0, len(d.errs))
	for a := range d.errs {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	errs := make([]error, len(addrs))
	for i, a := range addrs {
		errs[i] = d.errs[a]
	}
	return errors.Join(errs...)
}

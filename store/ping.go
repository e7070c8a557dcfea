package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// Ping checks that Redis answers and runs scripts: on the server, or on
// every master of a Cluster, it sends PING and then runs pingScript as every
// decision runs its script (EVALSHA, EVAL when the server does not have
// it). Call it at start-up, so that a wrong address, a missing server or a
// server that does not run scripts is an error there rather than a silent
// failure policy on every request. A server that does not run a command the
// store needs (EVALSHA or EVAL renamed away, TIME renamed away) gets an
// error wrapping ErrCommandRefused that names the command.
//
// Its error keeps the root cause. go-redis retries a failing dial until the
// context ends, so its own error for a server that refuses connections is
// only "context deadline exceeded"; when no connection could be opened,
// Ping dials the address itself and reports what the network said (e.g.
// "connection refused"). The error wraps ErrUnavailable.
func (r *Redis) Ping(ctx context.Context) error {
	var err error
	switch c := r.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			if err := m.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("master %s: %w", m.Options().Addr, dialCause(ctx, err, m.Options().Addr))
			}
			if err := pingScripts(ctx, m); err != nil {
				return fmt.Errorf("master %s: %w", m.Options().Addr, err)
			}
			return nil
		})
		if err != nil && c.PoolStats().TotalConns == 0 {
			// No master is known: the seed addresses did not answer.
			err = dialCause(ctx, err, c.Options().Addrs...)
		}
	default:
		err = r.client.Ping(ctx).Err()
		if err != nil {
			if o, ok := r.client.(interface{ Options() *redis.Options }); ok && r.client.PoolStats().TotalConns == 0 {
				err = dialCause(ctx, err, o.Options().Addr)
			}
		} else {
			err = pingScripts(ctx, r.client)
		}
	}
	if errors.Is(err, ErrCommandRefused) {
		return fmt.Errorf("store: redis ping: %w", err)
	}
	if err != nil {
		return fmt.Errorf("store: redis ping: %w: %w", ErrUnavailable, err)
	}
	return nil
}

// pingScript reads the server's TIME from inside a script, as every
// built-in script does when a request carries no time. It declares no key,
// so that every master of a Cluster runs it.
var pingScript = algorithm.NewScript("ping", "return redis.call('TIME')")

// pingScripts runs pingScript on c as decisions run their scripts, and
// returns an error wrapping ErrCommandRefused that names the command when
// the server does not run one of them.
func pingScripts(ctx context.Context, c redis.Scripter) error {
	_, err := runScript(ctx, c, pingScript, nil, nil)
	if err == nil {
		return nil
	}
	if cmd, ok := refusedCommand(err); ok {
		return fmt.Errorf("%w: %s (renamed or disabled? every decision is a Lua script run with EVALSHA, or EVAL when the server does not have it): %w",
			ErrCommandRefused, cmd, err)
	}
	return fmt.Errorf("script: %w", err)
}

// dialCause returns err with the reason a plain TCP dial to the first of
// addrs fails, when err is a timeout that may hide it; err alone when the
// dial succeeds or err is not a timeout.
func dialCause(ctx context.Context, err error, addrs ...string) error {
	if len(addrs) == 0 || !(errors.Is(err, context.DeadlineExceeded) || isNetTimeout(err)) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dialCauseTimeout)
	defer cancel()
	var d net.Dialer
	conn, derr := d.DialContext(ctx, "tcp", addrs[0])
	if derr != nil {
		return fmt.Errorf("%w (dialing %s: %w)", err, addrs[0], derr)
	}
	_ = conn.Close()
	return err
}

// dialCauseTimeout bounds the dial that looks for a timeout's root cause.
const dialCauseTimeout = time.Second

func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// PersistScriptKeys makes c remove the expiry of every key a script call
// names in its KEYS (EVAL, EVALSHA and their _RO forms, alone or in a
// pipeline), with a PERSIST of each right after the call, on c itself:
// for tests that decide on a virtual clock on a real server, whose Lua
// sets each key's expiry (PEXPIRE, SET PX) in the real time the server
// keeps. There, a key the virtual clock holds for a few milliseconds more
// could expire in real time before the next request the virtual clock
// says is close; the scripts keep their state's times in their values, so
// a key that never expires decides as the virtual clock says. What is
// left: a TTL shorter than one round trip can still run out between the
// call and its PERSIST. The PERSISTs' errors are not reported (a call
// whose context ended has no key to keep). Only c is changed: a test that
// reads TTLs uses a client of its own, without it. Safe for concurrent
// use, as c is.
func PersistScriptKeys(c redis.UniversalClient) {
	c.AddHook(persistHook{c})
}

// persistHook is PersistScriptKeys' hook, on client c.
type persistHook struct{ c redis.UniversalClient }

func (persistHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h persistHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.persist(ctx, cmd)
		return err
	}
}

func (h persistHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.persist(ctx, cmd)
		}
		return err
	}
}

// persist sends a PERSIST of each key of cmd when it is a script call.
func (h persistHook) persist(ctx context.Context, cmd redis.Cmder) {
	for _, k := range ScriptKeys(cmd.Args()) {
		_ = h.c.Persist(ctx, k).Err()
	}
}

// ScriptKeys returns the KEYS of args when they are a script call
// ("eval", "evalsha", "eval_ro" or "evalsha_ro", any case: script, the
// number of keys, the keys, the arguments), or nil.
func ScriptKeys(args []any) []string {
	if len(args) < 3 {
		return nil
	}
	switch strings.ToLower(fmt.Sprint(args[0])) {
	case "eval", "evalsha", "eval_ro", "evalsha_ro":
	default:
		return nil
	}
	n, err := strconv.Atoi(fmt.Sprint(args[2]))
	if err != nil || n < 0 || 3+n > len(args) {
		return nil
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint(args[3+i])
	}
	return keys
}

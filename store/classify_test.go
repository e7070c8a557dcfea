package store

import (
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
)

// replyErr is an error reply as go-redis returns it: a redis.Error.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

var _ redis.Error = replyErr("")

// Replies that refuse a command are ErrCommandRefused, named; others keep
// their class. The texts are the servers' own: Redis 7's (seen by
// TestScriptCommandsRefused on a real server), Redis 6's backquotes and
// its "Lua script" wording, a proxy's.
func TestRedisErrorClasses(t *testing.T) {
	for _, tc := range []struct {
		err   error
		class error
		named string
	}{
		{replyErr("ERR unknown command 'evalsha', with args beginning with: 'abc' '0' "), ErrCommandRefused, "EVALSHA"},
		{replyErr("ERR unknown command `eval`, with args beginning with: `return 1`, `0`, "), ErrCommandRefused, "EVAL"},
		{replyErr("ERR Unknown Redis command called from script script: 104ae65d, on @user_script:1."), ErrCommandRefused, "a command called by a script"},
		{replyErr("ERR Error running script (call to f_1234): @user_script:1: @user_script: 1: Unknown Redis command called from Lua script "), ErrCommandRefused, "a command called by a script"},
		{replyErr("ERR unsupported command 'evalsha'"), ErrCommandRefused, "EVALSHA"},
		{fmt.Errorf("wrapped: %w", replyErr("ERR unknown command 'del'")), ErrCommandRefused, "DEL"},
		{replyErr("NOPERM this user has no permissions to run the 'evalsha' command"), ErrUnavailable, ""},
		{replyErr("ERR Error running script: user_script:3: bad argument"), ErrRejected, ""},
		{replyErr("WRONGTYPE Operation against a key holding the wrong kind of value"), ErrWrongType, ""},
		{redis.ErrClosed, ErrClosed, ""},
		{fmt.Errorf("dial tcp: connection refused"), ErrUnavailable, ""},
	} {
		got := redisError("k", tc.err)
		if !errors.Is(got, tc.class) {
			t.Errorf("%q: got %v, want it to wrap %v", tc.err, got, tc.class)
		}
		if tc.class != ErrCommandRefused && errors.Is(got, ErrCommandRefused) {
			t.Errorf("%q: got %v, a command refusal", tc.err, got)
		}
		if tc.class != ErrRejected && tc.class != ErrWrongType && errors.Is(got, ErrRejected) {
			t.Errorf("%q: got %v, a rejection of one request", tc.err, got)
		}
		if cmd, _ := refusedCommand(tc.err); cmd != tc.named {
			t.Errorf("%q: names %q, want %q", tc.err, cmd, tc.named)
		}
	}
}

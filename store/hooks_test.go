package store_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// recorder is a go-redis hook that keeps the text (Cmd.String) of every
// command it sees, alone or in a pipeline: what a tracing or logging hook
// shows its user. Commands sent alone are held up for a while, so that
// concurrent decisions queue and ride pipelines.
type recorder struct {
	mu               sync.Mutex
	alone, pipelined []string
}

func (r *recorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.mu.Lock()
		r.alone = append(r.alone, cmd.String())
		r.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		return next(ctx, cmd)
	}
}

func (r *recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.mu.Lock()
		for _, c := range cmds {
			r.pipelined = append(r.pipelined, c.String())
		}
		r.mu.Unlock()
		return next(ctx, cmds)
	}
}

// TestRedisCommandsReadAsText: the client's hooks see each decision's
// EVALSHA as text, sent alone and in a pipeline: the script's SHA-1, one
// key, and the key's name (not, say, the address of a string), so that
// tracing and logging hooks show what was sent.
func TestRedisCommandsReadAsText(t *testing.T) {
	_, c := redistest.Mini(t)
	rec := &recorder{}
	c.AddHook(rec)
	s := stores.Redis(t, c, store.WithMaxInFlight(1))
	strat := algorithm.TokenBucket(100, time.Second, 100)
	prefix := redistest.Prefix()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			req := store.Request{Strategy: strat, Prefix: prefix, Key: "user-" + strconv.Itoa(i), N: 1, Timeout: 5 * time.Second}
			if _, err := s.Decide(ctx, req); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	evalshas := func(texts []string) int {
		n := 0
		for _, text := range texts {
			f := strings.Fields(text)
			if len(f) == 0 || f[0] != "evalsha" {
				continue // the connection's own set-up (HELLO, CLIENT SETINFO)
			}
			n++
			if len(f) < 4 || f[1] != strat.Script().SHA1 || f[2] != "1" ||
				!strings.HasPrefix(f[3], prefix+"{user-") || !strings.HasSuffix(f[3], "}:"+strat.Script().Tag) {
				t.Errorf("a hook saw %q, want evalsha, the SHA-1, 1 and the key's name", text)
			}
		}
		return n
	}
	alone, pipelined := evalshas(rec.alone), evalshas(rec.pipelined)
	if alone == 0 || pipelined == 0 || alone+pipelined != 8 {
		t.Fatalf("%d EVALSHAs alone, %d pipelined: want both, 8 in all", alone, pipelined)
	}
}

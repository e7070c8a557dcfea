package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
)

// target is a server the tool runs against, with a client for the
// application's side.
type target struct {
	name   string
	flag   []string
	client func(t *testing.T) redis.UniversalClient
}

func targets(t *testing.T) []target {
	return []target{
		{"redis", []string{"-redis", redistest.RealAddr(t)}, func(t *testing.T) redis.UniversalClient { return redistest.Real(t) }},
		{"cluster", []string{"-cluster", strings.Join(redistest.ClusterAddrs(t), ",")}, func(t *testing.T) redis.UniversalClient { return redistest.Cluster(t) }},
	}
}

// TestCommandEndToEnd runs the tool in process against the real
// redis-server and the Cluster, next to an application's limiter of the
// same name: every write the tool makes is what the application then
// decides by, every write says what it did, -json parses, and the exit
// codes tell success (0), a store failure (1) and bad input (2, nothing
// written) apart.
func TestCommandEndToEnd(t *testing.T) {
	ctx := context.Background()
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			name := "cli" + strings.Trim(strings.TrimPrefix(redistest.Prefix(), "test:"), ":")
			const rule = "sliding_window_log 3/1h"
			st := stores.Redis(t, tg.client(t))
			// app is a fresh instance of the application's limiter: its
			// first decision reads the override table.
			app := func() *fleetlimit.Limiter {
				l, err := fleetlimit.New(algorithm.SlidingWindowLog(3, time.Hour), st, fleetlimit.WithName(name), fleetlimit.WithOverrides(0))
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			tool := func(want int, args ...string) string {
				t.Helper()
				var out, errs bytes.Buffer
				full := append(append(append([]string{}, tg.flag...), "-name", name, "-rule", rule), args...)
				if code := run(ctx, full, &out, &errs); code != want {
					t.Fatalf("fleetlimit %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out.String(), errs.String())
				}
				return out.String()
			}
			contains := func(out string, want ...string) {
				t.Helper()
				for _, w := range want {
					if !strings.Contains(out, w) {
						t.Fatalf("output %q lacks %q", out, w)
					}
				}
			}

			contains(tool(0, "list"), "has no overrides or blocks")
			contains(tool(0, "set", "alice", "sliding_window_log 10/1h", "1d"), `key "alice"`, `"sliding_window_log 10/1h" for 24h0m0s`)
			if res, err := app().Allow(ctx, "alice"); err != nil || !res.Allowed || res.Limit != 10 {
				t.Fatalf("after set, the application decides alice: %+v, %v; want limit 10", res, err)
			}
			contains(tool(0, "set", "bob", "unlimited", "1h"), `key "bob"`, `"unlimited" for 1h0m0s`)
			contains(tool(0, "block", "carol", "10m"), `blocked key "carol"`, "for 10m0s")

			var list struct {
				Prefix    string
				Overrides []jsonOverride
			}
			if err := json.Unmarshal([]byte(tool(0, "-json", "list")), &list); err != nil {
				t.Fatal(err)
			}
			if o := list.Overrides; len(o) != 3 || o[0].Key != "alice" || o[0].Override != "sliding_window_log 10/1h" ||
				o[1].Key != "bob" || !o[1].Exempt || o[2].Key != "carol" || !o[2].Blocked || o[2].TTLSeconds <= 0 || o[2].TTLSeconds > 600 {
				t.Fatalf("list -json: %+v", list)
			}
			contains(tool(0, "list"), "alice", "bob", "unlimited", "carol", "block", "3 overrides and blocks")
			// Flags after the command's words, and a key after "--".
			if err := json.Unmarshal([]byte(tool(0, "list", "-json")), &list); err != nil || len(list.Overrides) != 3 {
				t.Fatalf("list -json: %+v, %v", list, err)
			}
			contains(tool(0, "block", "--", "-dash", "1m"), `blocked key "-dash"`)
			contains(tool(0, "unblock", "--", "-dash"), `unblocked key "-dash"`)

			a := app()
			if res, err := a.Allow(ctx, "carol"); err != nil || res.Allowed || res.RetryAfter <= 0 || res.RetryAfter > 10*time.Minute {
				t.Fatalf("blocked carol: %+v, %v", res, err)
			}
			for range 5 {
				if res, _ := a.Allow(ctx, "bob"); !res.Allowed {
					t.Fatalf("exempt bob denied: %+v", res)
				}
			}
			// show: what Peek says, and the override; alice spent 1 of 10.
			var state jsonState
			if err := json.Unmarshal([]byte(tool(0, "-json", "show", "alice")), &state); err != nil {
				t.Fatal(err)
			}
			if !state.Allowed || state.Limit != 10 || state.Remaining != 8 || state.Override == nil || state.Override.Override != "sliding_window_log 10/1h" || state.Rule != rule {
				t.Fatalf("show -json alice: %+v", state)
			}
			contains(tool(0, "show", "carol"), "override: block", "denied")

			contains(tool(0, "unblock", "carol"), `unblocked key "carol"`)
			contains(tool(0, "unblock", "carol"), "was not blocked: nothing changed")
			if res, _ := app().Allow(ctx, "carol"); !res.Allowed {
				t.Fatalf("unblocked carol denied: %+v", res)
			}
			contains(tool(0, "clear", "alice"), `cleared the override "sliding_window_log 10/1h" of key "alice"`)
			contains(tool(0, "clear", "alice"), "had no override: nothing changed")
			if res, _ := app().Peek(ctx, "alice", 1); res.Limit != 3 || res.Remaining != 1 {
				t.Fatalf("cleared alice: %+v; want her 1 spent of the limiter's 3", res)
			}
			contains(tool(0, "reset", "alice"), `reset key "alice"`)
			if res, _ := app().Peek(ctx, "alice", 1); res.Remaining != 2 {
				t.Fatalf("reset alice: %+v; want full (2 left after 1)", res)
			}

			// Bad input: exit 2, nothing written.
			tool(2, "set", "dave", "fixed_window 10/1h", "1h") // another shape
			tool(2, "set", "dave", "sliding_window_log 10/", "1h")
			tool(2, "set", "dave", "sliding_window_log 10/1h", "forever")
			tool(2, "block", "", "1h")
			tool(2, "frobnicate")
			tool(2, "show")
			if err := json.Unmarshal([]byte(tool(0, "-json", "list")), &list); err != nil || len(list.Overrides) != 1 || list.Overrides[0].Key != "bob" {
				t.Fatalf("after refused writes: %+v, %v", list, err)
			}
			// A store that does not answer: exit 1.
			var out, errs bytes.Buffer
			if code := run(ctx, []string{"-redis", "127.0.0.1:1", "-timeout", "200ms", "-name", name, "-rule", rule, "list"}, &out, &errs); code != exitStore {
				t.Fatalf("no server: exit %d (%s)", code, errs.String())
			}
		})
	}
}

// TestCommandComposite: show lists each member of a composite rule.
func TestCommandComposite(t *testing.T) {
	name := "cli" + strings.Trim(strings.TrimPrefix(redistest.Prefix(), "test:"), ":")
	var out, errs bytes.Buffer
	args := []string{"-redis", redistest.RealAddr(t), "-name", name, "-rule", "all(token_bucket 10/1s burst 20, sliding_window_counter 1000/24h)"}
	if code := run(context.Background(), append(args, "-json", "show", "k"), &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	var state jsonState
	if err := json.Unmarshal(out.Bytes(), &state); err != nil {
		t.Fatal(err)
	}
	if len(state.Members) != 2 || state.Members[0].Name != "token_bucket" || state.Members[0].Limit != 20 || state.Members[0].Remaining != 19 ||
		state.Members[1].Name != "sliding_window_counter" || state.Members[1].Remaining != 999 || state.Override != nil {
		t.Fatalf("show -json: %+v", state)
	}
	out.Reset()
	if code := run(context.Background(), append(args, "show", "k"), &out, &errs); code != 0 || !strings.Contains(out.String(), "MEMBER") || !strings.Contains(out.String(), "sliding_window_counter") {
		t.Fatalf("exit %d: %s", code, out.String())
	}
}

// TestCommandPenaltyBox: for a limiter built with WithPenalty, the tool
// given its rule in the text form (penalize(...)) writes overrides the
// application applies (the inner rule: the limiter puts it in its own
// box), whether the override is written with the box or without it, and
// names the application's keys (an unnamed limiter's prefix is its inner
// rule's); an override with another box is bad input.
func TestCommandPenaltyBox(t *testing.T) {
	ctx := context.Background()
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			name := "cli" + strings.Trim(strings.TrimPrefix(redistest.Prefix(), "test:"), ":")
			const rule = "penalize(sliding_window_log 3/1h, after 2 within 1m ban 10s max 1h)"
			st := stores.Redis(t, tg.client(t))
			app := func(opts ...fleetlimit.Option) *fleetlimit.Limiter {
				l, err := fleetlimit.New(algorithm.SlidingWindowLog(3, time.Hour), st, append([]fleetlimit.Option{fleetlimit.WithOverrides(0),
					fleetlimit.WithPenalty(2, time.Minute, 10*time.Second, time.Hour)}, opts...)...)
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			tool := func(want int, args ...string) string { t.Helper(); return runTool(t, tg, want, args...) }
			named := []string{"-name", name, "-rule", rule}
			tool(0, append(named, "set", "alice", "sliding_window_log 10/1h", "1d")...)
			tool(0, append(named, "set", "bob", "penalize(sliding_window_log 20/1h, after 2 within 1m ban 10s max 1h)", "1d")...)
			tool(2, append(named, "set", "dave", "penalize(sliding_window_log 20/1h, after 5 within 1m ban 10s max 1h)", "1d")...)
			a := app(fleetlimit.WithName(name))
			for key, limit := range map[string]int64{"alice": 10, "bob": 20, "dave": 3} {
				if res, err := a.Allow(ctx, key); err != nil || !res.Allowed || res.Limit != limit {
					t.Fatalf("the application decides %s: %+v, %v; want limit %d", key, res, err, limit)
				}
			}
			// Unnamed: the tool reads the keys the application spends.
			key := name + "-carol"
			if res, err := app().Allow(ctx, key); err != nil || !res.Allowed {
				t.Fatalf("unnamed application: %+v, %v", res, err)
			}
			var state jsonState
			if err := json.Unmarshal([]byte(tool(0, "-rule", rule, "-json", "show", key)), &state); err != nil {
				t.Fatal(err)
			}
			if state.Remaining != 1 || state.Rule != rule {
				t.Fatalf("show of the unnamed limiter's key: %+v; want 1 left after this 1 and the application's 1", state)
			}
		})
	}
}

// TestCommandLimiters runs limiters against the real redis-server and the
// Cluster, beside applications' limiters with WithRegistry: it lists each
// live limiter with its rule and instance count, for people and as JSON;
// a name run under two rules exits 3 and is marked, and exits 0 again once
// the other rule's instance is closed; a store that does not answer exits
// 1, bad usage 2.
func TestCommandLimiters(t *testing.T) {
	ctx := context.Background()
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			name := "cli" + strings.Trim(strings.TrimPrefix(redistest.Prefix(), "test:"), ":")
			// Each instance is a process of its own: its own store.
			app := func(s algorithm.Strategy) *fleetlimit.Limiter {
				l, err := fleetlimit.New(s, stores.Redis(t, tg.client(t)), fleetlimit.WithName(name), fleetlimit.WithRegistry(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				return l
			}
			tool := func(want int, args ...string) string { t.Helper(); return runTool(t, tg, want, args...) }
			contains := func(out string, want ...string) { t.Helper(); outputHas(t, out, want...) }
			contains(tool(0, "-name", name, "limiters"), "holds no live limiter")
			app(algorithm.SlidingWindowLog(100, time.Minute))
			app(algorithm.SlidingWindowLog(100, time.Minute))
			out := tool(0, "-name", name, "limiters")
			contains(out, name, "sliding_window_log 100/1m", "ratelimit:"+name+":", "1 limiters, 2 live instances")
			if strings.Contains(out, "CONFLICT") {
				t.Fatalf("one rule listed as a conflict: %s", out)
			}
			var list struct {
				Limiters []jsonRegistration
			}
			if err := json.Unmarshal([]byte(tool(0, "limiters", "-json", "-name", name)), &list); err != nil {
				t.Fatal(err)
			}
			if l := list.Limiters; len(l) != 1 || l[0].Name != name || l[0].Rule != "sliding_window_log 100/1m" || len(l[0].Instances) != 2 || l[0].Conflict ||
				l[0].Instances[0].TTLSeconds <= 0 || l[0].Instances[0].TTLSeconds > 60 {
				t.Fatalf("limiters -json: %+v", list)
			}
			// Without -name, the listing holds this name among the rest.
			if err := json.Unmarshal([]byte(tool(0, "-json", "limiters")), &list); err != nil || !slices.ContainsFunc(list.Limiters, func(r jsonRegistration) bool { return r.Name == name }) {
				t.Fatalf("limiters -json, every name: %v, %v", list, err)
			}
			// A rolling deploy: an instance under another rule.
			next := app(algorithm.SlidingWindowLog(200, time.Minute))
			contains(tool(exitConflict, "-name", name, "limiters"), "sliding_window_log 100/1m", "sliding_window_log 200/1m", "CONFLICT", "2 limiters, 3 live instances")
			if err := json.Unmarshal([]byte(tool(exitConflict, "-json", "-name", name, "limiters")), &list); err != nil || len(list.Limiters) != 2 || !list.Limiters[0].Conflict || !list.Limiters[1].Conflict {
				t.Fatalf("limiters -json, two rules: %+v, %v", list, err)
			}
			if err := next.Close(); err != nil {
				t.Fatal(err)
			}
			tool(0, "-name", name, "limiters")
			tool(2, "limiters", "extra")
			var o, e bytes.Buffer
			if code := run(ctx, []string{"-redis", "127.0.0.1:1", "-timeout", "200ms", "limiters"}, &o, &e); code != exitStore {
				t.Fatalf("no server: exit %d (%s)", code, e.String())
			}
		})
	}
}

// runTool runs the tool against tg with args, failing the test unless it
// exits want, and returns its output.
func runTool(t *testing.T, tg target, want int, args ...string) string {
	t.Helper()
	var out, errs bytes.Buffer
	if code := run(context.Background(), append(append([]string{}, tg.flag...), args...), &out, &errs); code != want {
		t.Fatalf("fleetlimit %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out.String(), errs.String())
	}
	return out.String()
}

// outputHas fails the test unless out contains every one of want.
func outputHas(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("output %q lacks %q", out, w)
		}
	}
}

// Command fleetlimit is the on-call engineer's tool for a fleet's limits:
// it lists the limiters the fleet runs and their rules (the registry:
// fleetlimit.WithRegistry, Registered), lists a limiter's overrides and
// blocks, shows a key's state, resets it, blocks and unblocks it, and
// sets and clears its overrides, in the
// store the fleet shares, through the same scripts as the fleet's own
// decisions and writes (fleetlimit.Limiter's Peek, Reset, SetOverride,
// ClearOverride, Block, Unblock, Overrides).
//
// Usage:
//
//	fleetlimit [flags] limiters                  every live limiter (of -name, if given), its rule and instances
//	fleetlimit [flags] list
//	fleetlimit [flags] show KEY
//	fleetlimit [flags] reset KEY
//	fleetlimit [flags] block KEY DURATION
//	fleetlimit [flags] unblock KEY
//	fleetlimit [flags] set KEY RULE TTL        RULE in the text form, e.g. "sliding_window_log 1000/1m", or unlimited
//	fleetlimit [flags] clear KEY
//
// limiters needs no -rule. Every other command works on one limiter,
// named as its code builds it: -rule is its strategy in
// the text form (algorithm.Parse), -name its WithName, or -prefix its
// WithKeyPrefix (neither: the unnamed limiter's prefix, made from its
// rule). A rule in a penalty box, "penalize(RULE, after ...)", is the
// limiter built from RULE with WithPenalty, as the application builds it:
// an override is stored as the rule alone (the limiter puts it in its own
// box), and "set" takes it with the limiter's box or without any.
// The fleet's instances apply a write within their refresh bound
// (fleetlimit.WithOverrides: 2x the refresh, 1s by default).
//
// The store: -redis host:port (standalone) or -cluster host:port,... ,
// with -password and -tls (a TLS connection verified against the system's
// roots) as go-redis takes them; -username for Redis ACLs.
//
// Flags may come before, between or after the command's words; after
// "--" every argument is a word (a key that starts with "-"). Output is
// for people; -json prints one JSON document instead. Every
// write says what it did. Exit codes: 0 done, 1 the store failed, 2 bad
// usage or input (nothing was written), 3 limiters found a name and key
// prefix run under two rules by live instances (it lists them all the
// same, marked as a conflict). -timeout bounds each store call, and the
// listing of limiters (one SCAN pass and one read per name) by ten times it.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// Exit codes.
const (
	exitOK       = 0
	exitStore    = 1
	exitUsage    = 2
	exitConflict = 3
)

// errConflict is limiters' finding of a name run under two rules.
var errConflict = errors.New("the fleet runs a limiter under two rules")

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// usageError is bad usage or input: nothing was written.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// cli is one invocation.
type cli struct {
	out        io.Writer
	json       bool
	limiter    *fleetlimit.Limiter
	rule       algorithm.Strategy // as -rule gave it
	box        *algorithm.Penalty // the rule's penalty box; nil: none
	store      store.Store
	timeout    time.Duration
	nameFilter string   // limiters: -name
	describe   string   // the limiter, for messages
	close      []func() // what setUp opened, to close at the end
}

// run is the command with its arguments; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fleetlimit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		addr     = fs.String("redis", "", "a standalone Redis `host:port`")
		cluster  = fs.String("cluster", "", "a Redis Cluster's `host:port,...`")
		username = fs.String("username", "", "the Redis ACL user")
		password = fs.String("password", "", "the Redis password")
		useTLS   = fs.Bool("tls", false, "connect with TLS")
		ruleText = fs.String("rule", "", "the limiter's rule in the text form, e.g. \"sliding_window_log 100/1m\" (required but for limiters)")
		name     = fs.String("name", "", "the limiter's name (WithName); for limiters, list only this name")
		prefix   = fs.String("prefix", "", "the limiter's key prefix (WithKeyPrefix); overrides -name's")
		asJSON   = fs.Bool("json", false, "print JSON")
		timeout  = fs.Duration("timeout", 2*time.Second, "bound on each store call")
	)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: fleetlimit [flags] limiters | list | show KEY | reset KEY | block KEY DURATION | unblock KEY | set KEY RULE TTL | clear KEY")
		fs.PrintDefaults()
	}
	pos, ok := parseInterleaved(fs, args)
	if !ok {
		return exitUsage
	}
	c := &cli{out: stdout, json: *asJSON}
	defer func() {
		for _, f := range slices.Backward(c.close) {
			f()
		}
	}()
	command := ""
	if len(pos) > 0 {
		command = pos[0]
	}
	err := c.setUp(ctx, command, *addr, *cluster, *username, *password, *useTLS, *ruleText, *name, *prefix, *timeout)
	if err == nil {
		err = c.do(ctx, pos)
	}
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errConflict):
		fmt.Fprintln(stderr, "fleetlimit:", err)
		return exitConflict
	case errors.As(err, &ue), errors.Is(err, fleetlimit.ErrInvalidConfig), errors.Is(err, fleetlimit.ErrInvalidKey),
		errors.Is(err, algorithm.ErrInvalidStrategy):
		fmt.Fprintln(stderr, "fleetlimit:", strings.TrimPrefix(err.Error(), "fleetlimit: "))
		if errors.As(err, &ue) {
			fs.Usage()
		}
		return exitUsage
	}
	fmt.Fprintln(stderr, "fleetlimit:", strings.TrimPrefix(err.Error(), "fleetlimit: "))
	return exitStore
}

// parseInterleaved parses args with fs, flags before, between or after the
// command's words ("list -json"), and returns the words; after "--"
// every argument is a word (a key that starts with "-").
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, bool) {
	var words []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, false
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(words, rest...), true
		}
		if len(rest) == 0 {
			return words, true
		}
		words, args = append(words, rest[0]), rest[1:]
	}
}

// setUp connects to the store and, unless the command is limiters (which
// reads the fleet's registry), builds the limiter.
func (c *cli) setUp(ctx context.Context, command, addr, cluster, username, password string, useTLS bool, ruleText, name, prefix string, timeout time.Duration) error {
	if (addr == "") == (cluster == "") {
		return usagef("give one of -redis and -cluster")
	}
	var s algorithm.Strategy
	if command != "limiters" {
		if ruleText == "" {
			return usagef("give -rule: the limiter's rule in the text form")
		}
		var err error
		if s, err = algorithm.Parse(ruleText); err != nil {
			return err
		}
	}
	var tlsConf *tls.Config
	if useTLS {
		tlsConf = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	var client redis.UniversalClient
	if addr != "" {
		client = redis.NewClient(&redis.Options{Addr: addr, Username: username, Password: password, TLSConfig: tlsConf, ContextTimeoutEnabled: true})
	} else {
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(cluster, ","), Username: username, Password: password, TLSConfig: tlsConf, ContextTimeoutEnabled: true})
	}
	c.close = append(c.close, func() { _ = client.Close() })
	st, err := store.NewRedis(client)
	if err != nil {
		return err
	}
	c.close = append(c.close, func() { _ = st.Close() })
	c.store, c.timeout, c.nameFilter = st, timeout, name
	if s == nil {
		return nil
	}
	opts := []fleetlimit.Option{fleetlimit.WithOverrides(0), fleetlimit.WithoutBreaker(), fleetlimit.WithFailurePolicy(fleetlimit.FailClosed), fleetlimit.WithTimeout(timeout)}
	if name != "" {
		opts = append(opts, fleetlimit.WithName(name))
	}
	if prefix != "" {
		opts = append(opts, fleetlimit.WithKeyPrefix(prefix))
	}
	// A penalty box is built as the application builds it, WithPenalty
	// around its strategy: its keys' prefix and its overrides are then
	// the application's.
	inner, box := unbox(s)
	if box != nil {
		opts = append(opts, fleetlimit.WithPenalty(box.After, box.Within, box.Ban, box.MaxBan))
	}
	l, err := fleetlimit.New(inner, st, opts...)
	if err != nil {
		return err
	}
	c.limiter, c.rule, c.box = l, s, box
	c.describe = fmt.Sprintf("limiter %s (keys %s*)", l.Name(), l.KeyPrefix())
	return nil
}

// do runs one command.
func (c *cli) do(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("give a command")
	}
	want := map[string]int{"limiters": 0, "list": 0, "show": 1, "reset": 1, "block": 2, "unblock": 1, "set": 3, "clear": 1}
	n, ok := want[args[0]]
	if !ok {
		return usagef("unknown command %q", args[0])
	}
	if len(args)-1 != n {
		return usagef("%s takes %d arguments, got %d", args[0], n, len(args)-1)
	}
	l := c.limiter
	switch args[0] {
	case "limiters":
		return c.limiters(ctx, c.nameFilter)
	case "list":
		return c.list(ctx)
	case "show":
		return c.show(ctx, args[1])
	case "reset":
		if err := l.Reset(ctx, args[1]); err != nil {
			return err
		}
		return c.did("reset", args[1], "reset key %q of %s: it is back at full capacity", args[1], c.describe)
	case "block":
		d, err := duration(args[2])
		if err != nil {
			return err
		}
		if err := l.Block(ctx, args[1], d); err != nil {
			return err
		}
		return c.did("block", args[1], "blocked key %q of %s for %v", args[1], c.describe, d)
	case "unblock":
		return c.remove(ctx, args[1], l.Unblock, func(was *fleetlimit.Override) bool { return was.Blocked }, "was not blocked",
			"unblock", func(was *fleetlimit.Override) string {
				return fmt.Sprintf("unblocked key %q of %s (%v of its block was left)", args[1], c.describe, was.TTL.Round(time.Millisecond))
			})
	case "set":
		s, err := c.override(args[2])
		if err != nil {
			return err
		}
		ttl, err := duration(args[3])
		if err != nil {
			return err
		}
		if err := l.SetOverride(ctx, args[1], s, ttl); err != nil {
			return err
		}
		text, _ := algorithm.Format(s)
		return c.did("set", args[1], "key %q of %s is now decided by %q for %v", args[1], c.describe, text, ttl)
	case "clear":
		return c.remove(ctx, args[1], l.ClearOverride, func(*fleetlimit.Override) bool { return true }, "had no override",
			"clear", func(was *fleetlimit.Override) string {
				return fmt.Sprintf("cleared the override %q of key %q of %s (%v of it was left): the limiter's own rule decides it again",
					was.Text, args[1], c.describe, was.TTL.Round(time.Millisecond))
			})
	}
	return nil
}

// unbox splits s into the strategy inside its penalty box and the box;
// a strategy without one is itself, with no box.
func unbox(s algorithm.Strategy) (algorithm.Strategy, *algorithm.Penalty) {
	p, ok := s.(interface {
		Unwrap() algorithm.Strategy
		Penalty() algorithm.Penalty
	})
	if !ok {
		return s, nil
	}
	box := p.Penalty()
	return p.Unwrap(), &box
}

// override reads set's rule: the limiter puts an override in its own
// penalty box, so one written with that box is stored without it, and
// one with another box is refused (an override changes the limit, not
// the box).
func (c *cli) override(text string) (algorithm.Strategy, error) {
	s, err := algorithm.Parse(text)
	if err != nil {
		return nil, err
	}
	inner, box := unbox(s)
	switch {
	case box == nil:
		return s, nil
	case c.box == nil || *box != *c.box:
		return nil, usagef("override %q has a penalty box, and not the limiter's: an override changes the limit, and the limiter keeps its own box (give the rule alone)", text)
	}
	return inner, nil
}

// duration reads a command's duration (Go's, or whole days).
func duration(s string) (time.Duration, error) {
	d, err := algorithm.ParseDuration(s)
	if err != nil {
		return 0, usagef("bad duration %q: %v", s, err)
	}
	return d, nil
}

// did reports a write: what it did, for people or as JSON.
func (c *cli) did(action, key, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if c.json {
		return c.emit(map[string]any{"action": action, "key": key, "limiter": c.limiter.Name(), "prefix": c.limiter.KeyPrefix(), "message": msg})
	}
	_, err := fmt.Fprintln(c.out, msg)
	return err
}

func (c *cli) emit(v any) error {
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// remove runs op (Unblock, ClearOverride) on key and reports what it
// changed, judged by key's entry in the override table read before it: if
// there was none, or had says it held nothing op removes, "none" with the
// message "key <key> of <limiter> <nothing>: nothing changed"; otherwise
// action with the message done writes of the entry.
func (c *cli) remove(ctx context.Context, key string, op func(context.Context, string) error, had func(was *fleetlimit.Override) bool,
	nothing, action string, done func(was *fleetlimit.Override) string) error {
	was, err := c.entry(ctx, key)
	if err != nil {
		return err
	}
	if err := op(ctx, key); err != nil {
		return err
	}
	if was == nil || !had(was) {
		return c.did("none", key, "key %q of %s %s: nothing changed", key, c.describe, nothing)
	}
	return c.did(action, key, "%s", done(was))
}

// entry is key's live entry in the override table, or nil.
func (c *cli) entry(ctx context.Context, key string) (*fleetlimit.Override, error) {
	all, err := c.limiter.Overrides(ctx)
	if err != nil {
		return nil, err
	}
	for i := range all {
		if all[i].Key == key {
			return &all[i], nil
		}
	}
	return nil, nil
}

// jsonOverride is an override as -json prints it.
type jsonOverride struct {
	Key        string  `json:"key"`
	Override   string  `json:"override"`
	Blocked    bool    `json:"blocked"`
	Exempt     bool    `json:"exempt"`
	TTLSeconds float64 `json:"ttl_seconds"`
}

func toJSON(o fleetlimit.Override) jsonOverride {
	return jsonOverride{Key: o.Key, Override: o.Text, Blocked: o.Blocked, Exempt: o.Text == "unlimited", TTLSeconds: o.TTL.Seconds()}
}

func (c *cli) list(ctx context.Context) error {
	all, err := c.limiter.Overrides(ctx)
	if err != nil {
		return err
	}
	if c.json {
		out := make([]jsonOverride, len(all))
		for i, o := range all {
			out[i] = toJSON(o)
		}
		return c.emit(map[string]any{"limiter": c.limiter.Name(), "prefix": c.limiter.KeyPrefix(), "overrides": out})
	}
	if len(all) == 0 {
		_, err := fmt.Fprintf(c.out, "%s has no overrides or blocks\n", c.describe)
		return err
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tOVERRIDE\tTTL")
	for _, o := range all {
		fmt.Fprintf(tw, "%s\t%s\t%v\n", o.Key, o.Text, o.TTL.Round(time.Second))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.out, "%d overrides and blocks of %s\n", len(all), c.describe)
	return err
}

// jsonState is a key's state as -json prints it.
type jsonState struct {
	Key               string        `json:"key"`
	Rule              string        `json:"rule"`
	Override          *jsonOverride `json:"override"`
	Allowed           bool          `json:"allowed"`
	Limit             int64         `json:"limit"`
	Remaining         int64         `json:"remaining"`
	RetryAfterSeconds float64       `json:"retry_after_seconds"`
	ResetAfterSeconds float64       `json:"reset_after_seconds"`
	Members           []jsonMember  `json:"members,omitempty"`
}

type jsonMember struct {
	Name              string  `json:"name"`
	Limit             int64   `json:"limit"`
	WindowSeconds     float64 `json:"window_seconds"`
	Remaining         int64   `json:"remaining"`
	RetryAfterSeconds float64 `json:"retry_after_seconds"`
	ResetAfterSeconds float64 `json:"reset_after_seconds"`
}

// show prints what Peek says of a request of 1 by key, per composite
// member, and the key's override.
func (c *cli) show(ctx context.Context, key string) error {
	res, err := c.limiter.Peek(ctx, key, 1)
	if err != nil {
		return err
	}
	ov, err := c.entry(ctx, key)
	if err != nil {
		return err
	}
	text, _ := algorithm.Format(c.rule)
	st := jsonState{Key: key, Rule: text, Allowed: res.Allowed, Limit: res.Limit, Remaining: res.Remaining,
		RetryAfterSeconds: res.RetryAfter.Seconds(), ResetAfterSeconds: res.ResetAfter.Seconds()}
	if ov != nil {
		j := toJSON(*ov)
		st.Override = &j
	}
	for _, m := range res.Limits() {
		st.Members = append(st.Members, jsonMember{Name: m.Name, Limit: m.Limit, WindowSeconds: m.Window.Seconds(), Remaining: m.Remaining,
			RetryAfterSeconds: m.RetryAfter.Seconds(), ResetAfterSeconds: m.ResetAfter.Seconds()})
	}
	if c.json {
		return c.emit(st)
	}
	fmt.Fprintf(c.out, "key %q of %s\nrule: %s\n", key, c.describe, text)
	if ov != nil {
		fmt.Fprintf(c.out, "override: %s for %v more\n", ov.Text, ov.TTL.Round(time.Second))
	} else {
		fmt.Fprintln(c.out, "override: none")
	}
	verdict := "admitted"
	if !res.Allowed {
		verdict = fmt.Sprintf("denied, retry after %v", res.RetryAfter)
	}
	fmt.Fprintf(c.out, "a request of 1 now: %s; remaining after it %d of %d; full again in %v\n", verdict, res.Remaining, res.Limit, res.ResetAfter)
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	if len(res.Limits()) > 0 {
		fmt.Fprintln(tw, "MEMBER\tLIMIT\tWINDOW\tREMAINING\tRETRY AFTER\tFULL IN")
		for _, m := range res.Limits() {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%v\t%v\n", m.Name, m.Limit, algorithm.FormatDuration(m.Window), m.Remaining, m.RetryAfter, m.ResetAfter)
		}
	}
	return tw.Flush()
}

// jsonRegistration is a registry entry as -json prints it.
type jsonRegistration struct {
	Name      string         `json:"name"`
	Prefix    string         `json:"prefix"`
	Rule      string         `json:"rule"`
	Conflict  bool           `json:"conflict"`
	Instances []jsonInstance `json:"instances"`
}

type jsonInstance struct {
	ID              string  `json:"id"`
	LastSeenSeconds float64 `json:"last_seen_seconds"`
	TTLSeconds      float64 `json:"ttl_seconds"`
}

// limiters prints what the fleet's registry holds (fleetlimit.Registered),
// of the name given with -name if any, and returns errConflict when a
// name and prefix run under two rules.
func (c *cli) limiters(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*c.timeout)
	defer cancel()
	all, err := fleetlimit.Registered(ctx, c.store)
	truncated := errors.Is(err, fleetlimit.ErrRegistryTruncated)
	if err != nil && !truncated {
		return err
	}
	if name != "" {
		all = slices.DeleteFunc(all, func(r fleetlimit.Registration) bool { return r.Name != name })
	}
	rules := map[[2]string]int{}
	for _, r := range all {
		rules[[2]string{r.Name, r.Prefix}]++
	}
	out := make([]jsonRegistration, len(all))
	conflicts := map[string]bool{}
	for i, r := range all {
		j := jsonRegistration{Name: r.Name, Prefix: r.Prefix, Rule: r.Rule, Conflict: rules[[2]string{r.Name, r.Prefix}] > 1}
		for _, in := range r.Instances {
			j.Instances = append(j.Instances, jsonInstance{ID: in.ID, LastSeenSeconds: in.Age.Seconds(), TTLSeconds: in.TTL.Seconds()})
		}
		if j.Conflict {
			conflicts[r.Name] = true
		}
		out[i] = j
	}
	if err := c.printLimiters(out, truncated); err != nil {
		return err
	}
	if len(conflicts) > 0 {
		return fmt.Errorf("%w: %s", errConflict, strings.Join(slices.Sorted(maps.Keys(conflicts)), ", "))
	}
	return nil
}

// printLimiters prints limiters' listing, for people or as JSON.
func (c *cli) printLimiters(out []jsonRegistration, truncated bool) error {
	if c.json {
		return c.emit(map[string]any{"limiters": out, "truncated": truncated})
	}
	if len(out) == 0 {
		_, err := fmt.Fprintln(c.out, "the registry holds no live limiter (limiters record themselves with fleetlimit.WithRegistry)")
		return err
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tRULE\tPREFIX\tINSTANCES\tLAST SEEN")
	instances := 0
	for _, r := range out {
		seen := time.Duration(math.MaxInt64)
		for _, in := range r.Instances {
			seen = min(seen, time.Duration(in.LastSeenSeconds*float64(time.Second)))
		}
		mark := ""
		if r.Conflict {
			mark = "  CONFLICT: another rule runs under this name"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%v ago%s\n", r.Name, r.Rule, r.Prefix, len(r.Instances), seen.Round(time.Millisecond), mark)
		instances += len(r.Instances)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	note := ""
	if truncated {
		note = fmt.Sprintf(" (the listing stops at %d names)", store.MaxRegistryNames)
	}
	_, err := fmt.Fprintf(c.out, "%d limiters, %d live instances%s\n", len(out), instances, note)
	return err
}

package compare

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// ErrNotMeasured is returned by the Server methods that read Redis's own
// accounting (INFO, MEMORY USAGE) on the embedded miniredis, which does not
// model Redis memory or command statistics.
var ErrNotMeasured = errors.New("compare: not measured on the embedded miniredis")

// ErrNoRedisServer is returned by Local when no redis-server binary is on
// the PATH.
var ErrNoRedisServer = errors.New("compare: no redis-server on the PATH")

type serverKind int

const (
	embedded serverKind = iota
	standalone
	cluster
)

// Server is the Redis the comparison runs against: the embedded miniredis
// (the default: no Redis needed), a real standalone server, or a Redis
// Cluster. It hands out clients, each with its own connection pool (a fleet
// of K instances gets K clients), and reads the server's accounting: INFO
// commandstats, memory and keyspace, and MEMORY USAGE.
//
// A Server is safe for concurrent use. Close releases what it opened: the
// embedded server, and its own admin client.
type Server struct {
	kind    serverKind
	mini    *miniredis.Miniredis
	addrs   []string
	admin   redis.UniversalClient
	product string // "Redis" or "Valkey", from INFO server (Redis when unknown)
	version string // the product's version from INFO server, when known

	proc       *exec.Cmd     // the throwaway redis-server Local started, or nil
	procExited chan struct{} // closed when proc has exited
	dir        string        // proc's working directory

	closeOnce sync.Once
}

// Embedded starts an in-process miniredis. Its clock is frozen, so keys never
// expire under the comparison's virtual time; it measures no memory, commands
// or latency.
func Embedded() (*Server, error) {
	m, err := miniredis.Run()
	if err != nil {
		return nil, fmt.Errorf("compare: starting the embedded miniredis: %w", err)
	}
	s := &Server{kind: embedded, mini: m, addrs: []string{m.Addr()}}
	s.admin = s.NewClient()
	return s, nil
}

// Standalone connects to a real redis-server at addr (host:port) and checks
// that it answers.
func Standalone(ctx context.Context, addr string) (*Server, error) {
	if addr == "" {
		return nil, errors.New("compare: empty Redis address")
	}
	s := &Server{kind: standalone, addrs: []string{addr}}
	return s.connect(ctx)
}

// Cluster connects to a Redis Cluster through its seed nodes addrs and checks
// that it answers.
func Cluster(ctx context.Context, addrs []string) (*Server, error) {
	var seeds []string
	for _, a := range addrs {
		if a = strings.TrimSpace(a); a != "" {
			seeds = append(seeds, a)
		}
	}
	if len(seeds) == 0 {
		return nil, errors.New("compare: no Redis Cluster address")
	}
	s := &Server{kind: cluster, addrs: seeds}
	return s.connect(ctx)
}

// Local starts a throwaway redis-server, the binary on the PATH, on a free
// loopback port with no persistence, and connects to it, so that a run with
// no flags measures real memory, commands and latency. Close stops the
// server and removes its directory. It returns ErrNoRedisServer when no
// redis-server is installed.
func Local(ctx context.Context) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoRedisServer
	}
	dir, err := os.MkdirTemp("", "fleetlimit-compare-")
	if err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	// The port is free when chosen but may be taken before redis-server
	// binds it: then try another.
	for range 5 {
		var s *Server
		if s, err = startLocal(ctx, bin, dir); err == nil {
			return s, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, err
}

// startLocal starts bin on a free port, working in dir, and waits until the
// server answering there is ours (its dir is dir).
func startLocal(ctx context.Context, bin, dir string) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("compare: finding a free port: %w", err)
	}
	addr := ln.Addr().String()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	_ = ln.Close()
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("compare: starting %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		got, err := c.ConfigGet(pctx, "dir").Result()
		cancel()
		switch {
		case err == nil && got["dir"] == dir:
			s := &Server{kind: standalone, addrs: []string{addr}, proc: cmd, dir: dir}
			s.procExited = exited
			if _, err := s.connect(ctx); err != nil {
				stop()
				return nil, err
			}
			return s, nil
		case err == nil:
			stop()
			return nil, fmt.Errorf("compare: port %s is taken by another redis-server", port)
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("compare: redis-server on %s exited at start (port taken?)", addr)
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return nil, fmt.Errorf("compare: redis-server on %s did not answer: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Server) connect(ctx context.Context) (*Server, error) {
	s.admin = s.NewClient()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.admin.Ping(ctx).Err(); err != nil {
		_ = s.admin.Close()
		return nil, fmt.Errorf("compare: Redis at %s does not answer: %w", strings.Join(s.addrs, ","), err)
	}
	// The version only labels the report: a server that hides INFO still
	// gets measured as far as it allows.
	if text, err := s.admin.Info(ctx, "server").Result(); err == nil {
		s.product, s.version = parseServer(text)
	}
	return s, nil
}

// parseServer reads which server INFO server describes, and its version:
// Valkey says server_name:valkey and valkey_version beside a redis_version
// it keeps for clients' sake (7.2.4 on Valkey 8); Redis says only
// redis_version. The product is "Redis" unless the text names Valkey.
func parseServer(text string) (product, version string) {
	fields := map[string]string{}
	for line := range strings.SplitSeq(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	if fields["server_name"] == "valkey" || fields["valkey_version"] != "" {
		return "Valkey", fields["valkey_version"]
	}
	return "Redis", fields["redis_version"]
}

// Embedded reports whether this is the in-process miniredis.
func (s *Server) Embedded() bool { return s.kind == embedded }

// String describes the server for reports: the product (Redis or Valkey)
// and its version, as the server reports them.
func (s *Server) String() string {
	version := ""
	if s.version != "" {
		version = " " + s.version
	}
	product, program := "Redis", "redis-server"
	if s.product == "Valkey" {
		product, program = "Valkey", "valkey-server"
	}
	switch {
	case s.kind == embedded:
		return "embedded miniredis"
	case s.proc != nil:
		return "a throwaway " + program + version + " on " + s.addrs[0] + ", started for this run and stopped after it"
	case s.kind == cluster:
		return product + " Cluster" + version + " at " + strings.Join(s.addrs, ",")
	}
	return program + version + " at " + s.addrs[0]
}

// NewClient returns a new client with its own connection pool, with context
// deadlines enabled. The caller closes it.
func (s *Server) NewClient() redis.UniversalClient {
	if s.kind == cluster {
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: s.addrs, ContextTimeoutEnabled: true, PoolSize: 32,
		})
	}
	return redis.NewClient(&redis.Options{
		Addr: s.addrs[0], ContextTimeoutEnabled: true, PoolSize: 32,
	})
}

// Close closes the admin client and stops the server if this Server started
// it (Embedded, Local).
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		err = s.admin.Close()
		if s.mini != nil {
			s.mini.Close()
		}
		if s.proc != nil {
			_ = s.proc.Process.Kill()
			<-s.procExited
			err = errors.Join(err, os.RemoveAll(s.dir))
		}
	})
	return err
}

// snapshot is the server's accounting at one moment, summed over every
// master of a cluster.
type snapshot struct {
	calls      map[string]int64 // INFO commandstats calls, by command
	usedMemory int64            // INFO memory used_memory, less nonKeyMemory where known, bytes
	keys       int64            // INFO keyspace keys, every database
}

// measurementCommands are the commands that the comparison and its clients
// send besides decisions; they are left out of commands per decision.
var measurementCommands = map[string]bool{
	"info": true, "memory": true, "memory|usage": true, "del": true, "ping": true,
	"hello": true, "client": true, "client|setinfo": true, "cluster": true,
	"cluster|slots": true, "cluster|shards": true, "cluster|nodes": true,
	"command": true, "readonly": true, "flushall": true, "script": true,
}

// snapshot reads INFO commandstats, memory and keyspace from every node that
// holds data (each master of a cluster) and sums them.
func (s *Server) snapshot(ctx context.Context) (snapshot, error) {
	if s.kind == embedded {
		return snapshot{}, ErrNotMeasured
	}
	cc, ok := s.admin.(*redis.ClusterClient)
	if !ok {
		return readSnapshot(ctx, s.admin)
	}
	total := snapshot{calls: map[string]int64{}}
	var mu sync.Mutex
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		one, err := readSnapshot(ctx, c)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for k, v := range one.calls {
			total.calls[k] += v
		}
		total.usedMemory += one.usedMemory
		total.keys += one.keys
		return nil
	})
	return total, err
}

// readSnapshot reads one node's accounting, as three INFO calls (servers
// before Redis 7 take one section per call), and takes from used_memory
// what MEMORY STATS says is spent on anything but keys.
func readSnapshot(ctx context.Context, c interface {
	redis.Cmdable
	Do(context.Context, ...any) *redis.Cmd
}) (snapshot, error) {
	snap := snapshot{calls: map[string]int64{}}
	for _, section := range []string{"commandstats", "memory", "keyspace"} {
		text, err := c.Info(ctx, section).Result()
		if err != nil {
			return snap, fmt.Errorf("compare: INFO %s: %w", section, err)
		}
		if err := parseInfo(text, &snap); err != nil {
			return snap, err
		}
	}
	// A server that refuses MEMORY STATS is measured by used_memory alone.
	if stats, err := c.Do(ctx, "MEMORY", "STATS").Result(); err == nil {
		snap.usedMemory -= nonKeyMemory(stats)
	}
	return snap, nil
}

// nonKeyFields are the MEMORY STATS fields, in bytes, of what Redis spends
// on anything but keys: the memory it started with, clients' buffers
// (each job opens clients of its own, whose buffers would otherwise count
// per key), replication, persistence, scripts.
var nonKeyFields = []string{"startup.allocated", "replication.backlog", "clients.slaves", "clients.normal",
	"cluster.links", "aof.buffer", "lua.caches", "functions.caches"}

// nonKeyMemory sums nonKeyFields in a MEMORY STATS reply: a map (RESP3) or
// a flat list of names and values (RESP2).
func nonKeyMemory(reply any) int64 {
	fields := map[string]any{}
	switch r := reply.(type) {
	case map[any]any:
		for k, v := range r {
			fields[fmt.Sprint(k)] = v
		}
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			fields[fmt.Sprint(r[i])] = r[i+1]
		}
	}
	var n int64
	for _, f := range nonKeyFields {
		if v, ok := fields[f].(int64); ok {
			n += v
		}
	}
	return n
}

// parseInfo adds the fields of one INFO reply that a snapshot keeps.
func parseInfo(text string, snap *snapshot) error {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, value, ok := strings.Cut(line, ":")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		switch {
		case strings.HasPrefix(name, "cmdstat_"):
			calls, err := infoField(value, "calls")
			if err != nil {
				return fmt.Errorf("compare: INFO %s: %w", name, err)
			}
			snap.calls[strings.TrimPrefix(name, "cmdstat_")] += calls
		case name == "used_memory":
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				return fmt.Errorf("compare: INFO used_memory %q: %w", value, err)
			}
			snap.usedMemory += n
		case strings.HasPrefix(name, "db") && strings.Contains(value, "keys="):
			n, err := infoField(value, "keys")
			if err != nil {
				return fmt.Errorf("compare: INFO %s: %w", name, err)
			}
			snap.keys += n
		}
	}
	return sc.Err()
}

// infoField returns field's integer in a "a=1,b=2" INFO value.
func infoField(value, field string) (int64, error) {
	for kv := range strings.SplitSeq(value, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k == field {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in %q", field, value)
}

// commandsSince is the number of commands the server ran between two
// snapshots, measurement commands left out.
func commandsSince(before, after snapshot) int64 {
	var n int64
	for cmd, calls := range after.calls {
		if !measurementCommands[cmd] {
			n += calls - before.calls[cmd]
		}
	}
	return n
}

// memoryUsage is MEMORY USAGE key SAMPLES 0 (every element counted) on a
// real Redis; on the embedded miniredis, which holds the same values but
// does not model memory, the estimate of modelMemoryUsage. 0 when the key
// does not exist.
func (s *Server) memoryUsage(ctx context.Context, key string) (float64, error) {
	if s.kind == embedded {
		k, err := readKey(ctx, s.admin, key)
		if err != nil || k.kind == "none" {
			return 0, err
		}
		return modelMemoryUsage(k)
	}
	n, err := s.admin.MemoryUsage(ctx, key, 0).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("compare: MEMORY USAGE %s: %w", key, err)
	}
	return float64(n), nil
}

// deleteKeys removes the keys a run left behind: on the embedded server
// everything (it is ours alone), on a real one exactly keys, with pipelined
// DELs (a cluster pipeline routes each to its slot). DEL, not UNLINK: UNLINK
// frees large values in a background thread, which would shrink used_memory
// in the middle of the next measurement.
func (s *Server) deleteKeys(ctx context.Context, keys []string) error {
	if s.kind == embedded {
		s.mini.FlushAll()
		return nil
	}
	const batch = 500
	for len(keys) > 0 {
		n := min(batch, len(keys))
		pipe := s.admin.Pipeline()
		for _, k := range keys[:n] {
			pipe.Del(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("compare: removing the run's keys: %w", err)
		}
		keys = keys[n:]
	}
	return nil
}

package compare

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/internal/redistest"
)

func TestNonKeyMemory(t *testing.T) {
	flat := []any{"peak.allocated", int64(9), "startup.allocated", int64(800), "clients.normal", int64(40),
		"lua.caches", int64(2), "db.0", []any{"overhead.hashtable.main", int64(72)}, "keys.count", int64(1)}
	resp3 := map[any]any{}
	for i := 0; i < len(flat); i += 2 {
		resp3[flat[i]] = flat[i+1]
	}
	for _, reply := range []any{flat, resp3} {
		if got := nonKeyMemory(reply); got != 842 {
			t.Errorf("nonKeyMemory(%v) = %d, want 842 (startup, clients and scripts; not the keys' tables)", reply, got)
		}
	}
}

func TestParseInfo(t *testing.T) {
	text := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=10,usec=300,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_zadd:calls=7,usec=40,usec_per_call=5.71,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=3,usec=90,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|setinfo:calls=4,usec=4,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n" +
		"\r\n# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\n" +
		"\r\n# Keyspace\r\ndb0:keys=12,expires=10,avg_ttl=5000\r\ndb3:keys=3,expires=0,avg_ttl=0\r\n"
	snap := snapshot{calls: map[string]int64{}}
	if err := parseInfo(text, &snap); err != nil {
		t.Fatal(err)
	}
	if snap.calls["evalsha"] != 10 || snap.calls["zadd"] != 7 || snap.usedMemory != 1048576 || snap.keys != 15 {
		t.Fatalf("parsed %+v", snap)
	}
	before := snapshot{calls: map[string]int64{"evalsha": 4, "zadd": 3, "info": 1}}
	// 6 EVALSHAs and 4 ZADDs ran; INFO and CLIENT SETINFO are ours.
	if got := commandsSince(before, snap); got != 10 {
		t.Fatalf("commands since = %d, want 10", got)
	}
	if err := parseInfo("cmdstat_get:usec=3\r\n", &snap); err == nil {
		t.Fatal("a commandstats line without calls parsed")
	}
}

func TestEmbeddedEstimatesMemoryOnly(t *testing.T) {
	srv, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	if _, err := srv.snapshot(ctx); !errors.Is(err, ErrNotMeasured) {
		t.Errorf("snapshot: %v, want ErrNotMeasured", err)
	}
	// Memory is estimated from what the key holds.
	if n, err := srv.memoryUsage(ctx, "k"); n != 0 || err != nil {
		t.Errorf("memoryUsage of a missing key: %v, %v", n, err)
	}
	if err := srv.admin.Set(ctx, "k", "1700000000000000", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// An integer string: its object (16), the key's sds (1+1+1 -> 8) and
	// its dictionary entry (24).
	if n, err := srv.memoryUsage(ctx, "k"); n != 48 || err != nil {
		t.Errorf("memoryUsage of an integer string: %v, %v, want 48", n, err)
	}
	if err := srv.admin.HSet(ctx, "h", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.memoryUsage(ctx, "h"); err == nil {
		t.Error("memoryUsage of a hash, which the model does not cover: no error")
	}
	if !srv.Embedded() || srv.String() != "embedded miniredis" {
		t.Errorf("embedded server says %q", srv.String())
	}
	if err := srv.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

func TestUnreachableServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Standalone(ctx, "127.0.0.1:1"); err == nil {
		t.Error("connected to nothing")
	}
	if _, err := Cluster(ctx, []string{" ", ""}); err == nil {
		t.Error("a cluster with no address")
	}
	if _, err := Standalone(ctx, ""); err == nil {
		t.Error("an empty address")
	}
}

// The server is named from INFO server: Valkey by server_name and
// valkey_version, not by the redis_version it reports beside them.
func TestParseServer(t *testing.T) {
	for _, c := range []struct{ text, product, version string }{
		{"# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", "Redis", "7.0.15"},
		{"# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n", "Valkey", "8.0.1"},
		{"", "Redis", ""},
	} {
		if p, v := parseServer(c.text); p != c.product || v != c.version {
			t.Errorf("parseServer(%q) = %q, %q; want %q, %q", c.text, p, v, c.product, c.version)
		}
	}
}

// TestRealAccounting checks the measurements against the real servers
// (redis-server, valkey-server): the report names each with its version, a
// script's inner commands are counted, MEMORY USAGE sees a key, and the
// run's keys are removed.
func TestRealAccounting(t *testing.T) {
	type server struct{ addr, name string }
	servers := map[string]server{"redis": {redistest.RealAddr(t), `^redis-server 7\.\d+\.\d+ at \S+$`}}
	if redistest.HaveValkey(t) {
		servers["valkey"] = server{redistest.ValkeyAddr(t), `^valkey-server 8\.\d+\.\d+ at \S+$`}
	}
	for product, srv := range servers {
		t.Run(product, func(t *testing.T) { testRealAccounting(t, srv.addr, regexp.MustCompile(srv.name)) })
	}
	if redistest.HaveValkey(t) {
		srv, err := Cluster(context.Background(), redistest.ValkeyClusterAddrs(t))
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		if name := srv.String(); !regexp.MustCompile(`^Valkey Cluster 8\.\d+\.\d+ at \S+$`).MatchString(name) {
			t.Errorf("Valkey Cluster named %q", name)
		}
	}
}

func testRealAccounting(t *testing.T, addr string, name *regexp.Regexp) {
	ctx := context.Background()
	srv, err := Standalone(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if got := srv.String(); !name.MatchString(got) {
		t.Errorf("server named %q, want %v", got, name)
	}
	key := redistest.Prefix() + "k"
	before, err := srv.snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	script := "redis.call('SET', KEYS[1], '12345') return redis.call('GET', KEYS[1])"
	if err := srv.admin.Eval(ctx, script, []string{key}).Err(); err != nil {
		t.Fatal(err)
	}
	after, err := srv.snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// EVAL, SET and GET; other tests on the server can only add.
	if n := commandsSince(before, after); n < 3 {
		t.Errorf("%d commands counted, want at least 3", n)
	}
	if after.usedMemory <= 0 || after.keys < 1 {
		t.Errorf("snapshot %+v", after)
	}
	if n, err := srv.memoryUsage(ctx, key); err != nil || n <= 0 {
		t.Errorf("MEMORY USAGE = %v, %v", n, err)
	}
	if err := srv.deleteKeys(ctx, []string{key}); err != nil {
		t.Fatal(err)
	}
	if n, err := srv.admin.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Errorf("key left behind: %d, %v", n, err)
	}
	if n, err := srv.memoryUsage(ctx, key); err != nil || n != 0 {
		t.Errorf("MEMORY USAGE of a missing key = %v, %v", n, err)
	}
}

// TestLocal: the default run's throwaway redis-server answers, is named as
// such, measures memory, and is gone, with its directory, after Close.
func TestLocal(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		redistest.RealAddr(t) // skips, or fails under FLEETLIMIT_REQUIRE_REDIS=1
		t.Skip("redis-server is not installed")
	}
	ctx := context.Background()
	srv, err := Local(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if srv.Embedded() || !strings.HasPrefix(srv.String(), "a throwaway redis-server 7") {
		t.Errorf("local server named %q", srv.String())
	}
	if err := srv.admin.Set(ctx, "k", "1700000000000000", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := srv.memoryUsage(ctx, "k"); err != nil || n <= 0 {
		t.Errorf("MEMORY USAGE = %v, %v", n, err)
	}
	addr, dir := srv.addrs[0], srv.dir
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("directory %s left behind: %v", dir, err)
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still answers after Close", addr)
	}
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is the throwaway redis-server every Redis measurement runs against:
// started on a free loopback port, no persistence, killed on exit.
type server struct {
	cmd   *exec.Cmd
	dir   string
	addr  string
	admin *redis.Client // INFO, MEMORY USAGE, DBSIZE, FLUSHALL: never the measured clients
}

func startServer(bin string) (*server, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("%s not found (./run.sh installs Debian's redis-server): %w", bin, err)
	}
	dir, err := os.MkdirTemp("", "fleetbench-redis-")
	if err != nil {
		return nil, err
	}
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", dir+"/redis.log")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		s := &server{cmd: cmd, dir: dir, addr: fmt.Sprintf("127.0.0.1:%d", port)}
		s.admin = redis.NewClient(&redis.Options{Addr: s.addr, ContextTimeoutEnabled: true})
		if s.waitReady(5 * time.Second) {
			return s, nil
		}
		s.stop()
		dir, _ = os.MkdirTemp("", "fleetbench-redis-")
	}
	return nil, fmt.Errorf("could not start %s on a free loopback port in 5 attempts", bin)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *server) waitReady(limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := s.admin.Ping(ctx).Err()
		cancel()
		if err == nil {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func (s *server) stop() {
	_ = s.admin.Close()
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			_ = s.cmd.Process.Kill()
			<-done
		}
	}
	_ = os.RemoveAll(s.dir)
}

// info returns the fields of INFO sections as a map.
func (s *server) info(ctx context.Context, sections ...string) (map[string]string, error) {
	txt, err := s.admin.Info(ctx, sections...).Result()
	if err != nil {
		return nil, err
	}
	return parseInfo(txt), nil
}

func parseInfo(txt string) map[string]string {
	m := make(map[string]string)
	sc := bufio.NewScanner(strings.NewReader(txt))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if ok {
			m[k] = v
		}
	}
	return m
}

// snapshot is the server counters a measurement is the difference of.
type snapshot struct {
	calls map[string]int64 // commandstats calls by command, admin commands left out
	cpu   float64          // used_cpu_user + used_cpu_sys, seconds
}

func (s *server) snapshot(ctx context.Context) (snapshot, error) {
	m, err := s.info(ctx, "commandstats", "cpu")
	if err != nil {
		return snapshot{}, err
	}
	return snapshotOf(m), nil
}

func snapshotOf(m map[string]string) snapshot {
	snap := snapshot{calls: make(map[string]int64)}
	for k, v := range m {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok || adminCommand(name) {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			if c, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.ParseInt(c, 10, 64)
				snap.calls[name] = n
			}
		}
	}
	user, _ := strconv.ParseFloat(m["used_cpu_user"], 64)
	sys, _ := strconv.ParseFloat(m["used_cpu_sys"], 64)
	snap.cpu = user + sys
	return snap
}

// adminCommand reports commands that the harness or connection set-up sends,
// which are not part of any decision.
func adminCommand(name string) bool {
	base, _, _ := strings.Cut(name, "|")
	switch base {
	case "info", "hello", "client", "ping", "dbsize", "memory", "flushall", "flushdb",
		"scan", "randomkey", "config", "select", "auth", "command", "script":
		return true
	}
	return false
}

// delta returns after - before, per command, and the total.
func delta(before, after snapshot) (map[string]int64, int64) {
	d := make(map[string]int64)
	var total int64
	for k, v := range after.calls {
		if n := v - before.calls[k]; n > 0 {
			d[k] = n
			total += n
		}
	}
	return d, total
}

func (s *server) usedMemory(ctx context.Context) (int64, error) {
	m, err := s.info(ctx, "memory")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(m["used_memory"], 10, 64)
}

// keyspaceBytes is the memory the key space holds: MEMORY STATS
// dataset.bytes (allocations less every overhead, client buffers included)
// plus the main and expiry hash tables of db 0. Unlike used_memory it does
// not move with connection buffers.
func (s *server) keyspaceBytes(ctx context.Context) (int64, error) {
	v, err := s.admin.Do(ctx, "MEMORY", "STATS").Result()
	if err != nil {
		return 0, err
	}
	m := flatMap(v)
	total := toInt(m["dataset.bytes"])
	db := flatMap(m["db.0"])
	total += toInt(db["overhead.hashtable.main"]) + toInt(db["overhead.hashtable.expires"])
	return total, nil
}

// flatMap reads a RESP3 map or a RESP2 flat array of pairs.
func flatMap(v any) map[string]any {
	m := map[string]any{}
	switch x := v.(type) {
	case map[any]any:
		for k, v := range x {
			m[fmt.Sprint(k)] = v
		}
	case []any:
		for i := 0; i+1 < len(x); i += 2 {
			m[fmt.Sprint(x[i])] = x[i+1]
		}
	}
	return m
}

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case float64:
		return int64(x)
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

// cpuTicks reads the machine's busy clock ticks (all cores) from /proc/stat
// and the ticks spent by this process and by pid.
func cpuTicks(pid int) (busy, self, other int64) {
	f := strings.Fields(readFirstLine("/proc/stat"))
	if len(f) > 8 && f[0] == "cpu" {
		for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system irq softirq steal
			n, _ := strconv.ParseInt(f[i], 10, 64)
			busy += n
		}
	}
	return busy, procTicks("self"), procTicks(strconv.Itoa(pid))
}

func procTicks(pid string) int64 {
	if pid == "0" {
		return 0
	}
	line := readFirstLine("/proc/" + pid + "/stat")
	// The command name may hold spaces; fields count from after its ')'.
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(line[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64) // utime, field 14
	s, _ := strconv.ParseInt(f[12], 10, 64) // stime, field 15
	return u + s
}

func readFirstLine(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return line
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// loadMeter measures how many cores processes other than this one and
// redis-server kept busy over an interval: the noise a measurement ran in.
type loadMeter struct {
	pid               int
	t                 time.Time
	busy, self, other int64
}

func startLoad(pid int) loadMeter {
	m := loadMeter{pid: pid, t: time.Now()}
	m.busy, m.self, m.other = cpuTicks(pid)
	return m
}

// others returns the cores that other processes used since start.
func (m loadMeter) others() float64 {
	busy, self, other := cpuTicks(m.pid)
	d := time.Since(m.t).Seconds()
	if d <= 0 {
		return 0
	}
	// Per-process and per-machine ticks are sampled differently; a small
	// negative difference means nobody else ran.
	return max(0, float64((busy-m.busy)-(self-m.self)-(other-m.other))/clockTicks/d)
}

func (s *server) pid() int {
	if s == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

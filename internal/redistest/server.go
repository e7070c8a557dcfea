package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server (or valkey-server) process owned by one test, for
// faults the shared server must not suffer: kill it, restart it, reconfigure
// it. It listens on a loopback port that stays the same across restarts.
type Server struct {
	t    testing.TB
	Addr string
	bin  string // redis-server or valkey-server
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

// Binaries are the server programs a Server runs: redis-server and
// valkey-server, which take the same arguments.
var Binaries = []string{"redis-server", "valkey-server"}

// StartServer starts a redis-server with no persistence and the extra
// arguments given (e.g. "--maxmemory", "1mb"), and stops it when the test
// ends. When redis-server is not installed the test skips (fails under
// RequireEnv).
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	return StartServerOf(t, "redis-server", args...)
}

// StartServerOf is StartServer with the program bin (one of Binaries).
func StartServerOf(t testing.TB, bin string, args ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath(bin); err != nil {
		missing(t, "%s is not installed: run ./test.sh, which installs it", bin)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir(), args: args}
	t.Cleanup(s.Kill)
	// The port is free when chosen but may be taken before redis-server
	// binds it (by another test's server): then try another.
	var err error
	for range 5 {
		ln, lerr := net.Listen("tcp", "127.0.0.1:0")
		if lerr != nil {
			t.Fatal(lerr)
		}
		s.port = ln.Addr().(*net.TCPAddr).Port
		s.Addr = "127.0.0.1:" + strconv.Itoa(s.port)
		_ = ln.Close()
		if err = s.start(); err == nil {
			return s
		}
	}
	t.Fatal(err)
	return nil
}

// Start starts the server (again) on its port and waits until it answers.
func (s *Server) Start() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatal(err)
	}
}

func (s *Server) start() error {
	if s.cmd != nil {
		return fmt.Errorf("%s on %s is already running", s.bin, s.Addr)
	}
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", s.dir}, s.args...)
	cmd := exec.Command(s.bin, args...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		dir, err := c.ConfigGet(ctx, "dir").Result()
		cancel()
		if err == nil {
			if dir["dir"] == s.dir {
				return nil
			}
			// Another test's server answers on this port: ours lost the race.
			s.Kill()
			return fmt.Errorf("port %d is taken by another server (dir %q)", s.port, dir["dir"])
		}
		select {
		case <-s.done:
			s.cmd = nil
			return fmt.Errorf("%s on %s exited at start (port taken?)", s.bin, s.Addr)
		default:
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("%s on %s did not answer: %v", s.bin, s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops the server abruptly (SIGKILL), as a crash would, and waits for
// it to exit. Its data is lost. Killing a stopped server does nothing.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart kills the server and starts a fresh one on the same port: empty
// data, empty script cache.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	s.Start()
}

// Client returns a client for the server with ContextTimeoutEnabled, closed
// when the test ends.
func (s *Server) Client(opts ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

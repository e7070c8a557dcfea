package faults_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/httplimit"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/store"
)

// A client that goes away walks past no limit. net/http cancels a request's
// context when it reads the client's FIN (a half-close: the client can still
// read the answer) or its RST; a limiter that applied the failure policy to
// that cancelled call would admit it uncounted under FailOpen. Here 16
// clients at a time send 200 POSTs over real TCP connections to a
// 5-per-hour limit, each half-closing (or resetting) its connection right
// after the request: whatever the store and policy, the handler runs at most
// 5 times and at most 5 clients read a 200; the clients who read an answer
// read a 429 or the middleware's 499.
func TestClientGoneIsNeverAdmitted(t *testing.T) {
	stores := map[string]store.Store{"memory": store.NewMemory(), "redis": redisStore(t, redistest.Real(t))}
	t.Cleanup(func() { _ = stores["memory"].Close() })
	for name, st := range stores {
		for _, policy := range policies {
			for _, how := range []string{"half-close", "reset"} {
				t.Run(fmt.Sprintf("%s/%s/%s", name, policy, how), func(t *testing.T) {
					l := newLimiter(t, algorithm.SlidingWindowLog(5, time.Hour), st, fleetlimit.WithFailurePolicy(policy))
					var ran atomic.Int64
					handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						ran.Add(1)
						_, _ = io.WriteString(w, "logged in\n")
					})
					srv := httptest.NewServer(httplimit.Middleware(l, httplimit.KeyByHeader("X-User"))(handler))
					t.Cleanup(srv.Close)

					const clients, requests = 16, 200
					var mu sync.Mutex
					statuses := map[int]int{}
					var wg sync.WaitGroup
					next := make(chan struct{}, requests)
					for range requests {
						next <- struct{}{}
					}
					close(next)
					for range clients {
						wg.Go(func() {
							for range next {
								status := goneRequest(t, srv.Listener.Addr().String(), how)
								mu.Lock()
								statuses[status]++
								mu.Unlock()
							}
						})
					}
					wg.Wait()
					t.Logf("handler ran %d times; statuses read: %v", ran.Load(), statuses)
					require.LessOrEqual(t, ran.Load(), int64(5), "the handler ran past the limit")
					require.LessOrEqual(t, statuses[http.StatusOK], 5, "clients read 200 past the limit")
					for status := range statuses {
						require.Contains(t, []int{0, http.StatusOK, http.StatusTooManyRequests, httplimit.StatusClientClosedRequest}, status)
					}
				})
			}
		}
	}
}

// goneRequest sends one POST /login for user "mallory" on a new connection
// to addr, then half-closes the connection (and reads the answer's status)
// or resets it (status 0).
func goneRequest(t *testing.T, addr, how string) int {
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	tcp := c.(*net.TCPConn)
	_, err = io.WriteString(c, "POST /login HTTP/1.1\r\nHost: x\r\nX-User: mallory\r\nContent-Length: 0\r\n\r\n")
	require.NoError(t, err)
	if how == "reset" {
		require.NoError(t, tcp.SetLinger(0)) // Close sends RST
		return 0
	}
	require.NoError(t, tcp.CloseWrite())
	require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0 // the server closed without an answer
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

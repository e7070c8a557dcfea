package store

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// replyDropper is a TCP proxy to a Redis server that passes on every byte a
// client sends, and the server's replies until a script: hold after a
// script's reply begins, it closes the connection, as a network that fails
// after Redis ran a command does.
// scripts counts the EVALSHA and EVAL commands it passed on.
type replyDropper struct {
	ln      net.Listener
	scripts atomic.Int64
}

func newReplyDropper(t *testing.T, server string, hold time.Duration) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &replyDropper{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.serve(client, server, hold) })
		}
	})
	return p
}

// serve relays client's commands to server, and server's replies back
// until client has sent a script: then, hold after that script's reply
// begins, it closes both ends without relaying it.
func (p *replyDropper) serve(client net.Conn, server string, hold time.Duration) {
	defer client.Close()
	up, err := net.Dial("tcp", server)
	if err != nil {
		return
	}
	defer up.Close()
	var (
		mu   sync.Mutex
		sent []byte
	)
	scripts := func() int {
		mu.Lock()
		defer mu.Unlock()
		lower := bytes.ToLower(sent)
		return bytes.Count(lower, []byte("\r\nevalsha\r\n")) + bytes.Count(lower, []byte("\r\neval\r\n"))
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				mu.Lock()
				sent = append(sent, buf[:n]...)
				mu.Unlock()
				if _, werr := up.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := up.Read(buf)
		if err != nil {
			break
		}
		if scripts() > 0 {
			time.Sleep(hold)
			break
		}
		if _, err := client.Write(buf[:n]); err != nil {
			break
		}
	}
	client.Close()
	up.Close()
	<-done
	p.scripts.Add(int64(scripts()))
}

// A script's command is never sent twice, whatever the client's MaxRetries
// (go-redis resends a command whose connection failed, 3 times by default):
// through a proxy that drops every connection once Redis has answered, a
// lone decision's EVALSHA reaches the server once, and a batch of 8
// decisions queued behind it reaches it once each, as one pipeline. A
// resent script would charge its request again (a decision, a lease's
// hand-back, a refund or a settle run twice).
func TestScriptsAreNeverResent(t *testing.T) {
	mr := miniredis.RunT(t)
	proxy := newReplyDropper(t, mr.Addr(), 150*time.Millisecond)
	c := redis.NewClient(&redis.Options{Addr: proxy.ln.Addr().String(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	require.Equal(t, 3, c.Options().MaxRetries, "go-redis's default: a failed command is resent 3 times")
	r := newRedis(t, c, WithMaxInFlight(1))
	s := algorithm.FixedWindow(100, time.Minute)
	decide := func(key string) chan error {
		out := make(chan error, 1)
		go func() {
			_, err := r.Decide(context.Background(), Request{Strategy: s, Prefix: "p:", Key: key, N: 1, Timeout: 3 * time.Second})
			out <- err
		}()
		return out
	}

	require.Error(t, <-decide("lone"))
	require.Eventually(t, func() bool { return proxy.scripts.Load() >= 1 }, time.Second, time.Millisecond)
	require.Equal(t, int64(1), proxy.scripts.Load(), "the lone decision's script, sent once")

	holder := decide("holder")
	require.Eventually(t, func() bool { return queuedBehindOne(r, 0) }, time.Second, time.Millisecond)
	var batch []chan error
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		batch = append(batch, decide(k))
	}
	require.Eventually(t, func() bool { return queuedBehindOne(r, 8) }, time.Second, time.Millisecond)
	require.Error(t, <-holder)
	for _, e := range batch {
		require.Error(t, <-e)
	}
	require.Eventually(t, r.combine.idle, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return proxy.scripts.Load() >= 10 }, time.Second, time.Millisecond)
	time.Sleep(200 * time.Millisecond) // a resend would arrive by now
	require.Equal(t, int64(1+1+8), proxy.scripts.Load(), "the holder's script and the batch's 8, each sent once")
}

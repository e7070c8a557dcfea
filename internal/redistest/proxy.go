package redistest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy on a loopback port between Redis clients and a Redis
// server, for the network faults a deployment sees: slow replies (latency), a
// server that accepts connections and never answers (a black hole), reset
// connections, and a move to another server (a failover behind a fixed
// address). Point a client at Proxy.Addr instead of the server.
//
// It counts the connections it accepts and the most it held open at once, so
// that a test can tell a bounded pool from a reconnection storm.
//
// A Proxy is safe for concurrent use; it is closed when the test ends.
type Proxy struct {
	// Addr is the address clients connect to.
	Addr string

	ln       net.Listener
	accepted atomic.Int64
	wg       sync.WaitGroup

	mu        sync.Mutex
	target    string
	latency   time.Duration
	blackHole bool
	conns     map[*proxyConn]struct{}
	peak      int
	closed    bool
}

// proxyConn is one client connection and, unless it was accepted inside a
// black hole, its connection to the server.
type proxyConn struct {
	client, server net.Conn      // server is nil when accepted inside a black hole
	lost           atomic.Bool   // bytes were swallowed: the protocol stream is broken
	done           chan struct{} // closed when the connection ends
	once           sync.Once
}

// NewProxy starts a proxy to target (host:port) and stops it when the test
// ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), ln: ln, target: target, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.Close)
	return p
}

// SetTarget sends new connections to addr; open ones stay where they are
// (ResetAll moves them, as a failover behind a fixed address would).
func (p *Proxy) SetTarget(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = addr
}

// SetLatency delays every chunk the server sends by d (0: none), so a reply
// takes at least d longer: a slow server or a slow network.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = d
}

// SetBlackHole(true) makes the server unreachable without refusing anything:
// new connections are accepted and never connected onwards, and nothing is
// forwarded either way on open ones; clients see only silence. Turning it
// off resets every connection that lost bytes or was never connected onwards
// (their protocol streams are broken), as a client would eventually see
// after a partition heals; the others carry on.
func (p *Proxy) SetBlackHole(on bool) {
	p.mu.Lock()
	p.blackHole = on
	var broken []*proxyConn
	if !on {
		for c := range p.conns {
			if c.server == nil || c.lost.Load() {
				broken = append(broken, c)
			}
		}
	}
	p.mu.Unlock()
	for _, c := range broken {
		c.reset()
	}
}

// ResetAll resets every open connection (the client sees ECONNRESET).
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	all := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		all = append(all, c)
	}
	p.mu.Unlock()
	for _, c := range all {
		c.reset()
	}
}

// Accepted is the number of client connections accepted so far.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Open is the number of client connections open now.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// PeakOpen is the most client connections that were open at once.
func (p *Proxy) PeakOpen() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peak
}

// Close stops accepting, resets every connection and waits for the proxy's
// goroutines to end. Closing twice does nothing.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.ResetAll()
	p.wg.Wait()
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		p.mu.Lock()
		target, hole, closed := p.target, p.blackHole, p.closed
		p.mu.Unlock()
		if closed {
			_ = client.Close()
			return
		}
		c := &proxyConn{client: client, done: make(chan struct{})}
		if !hole {
			server, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				// The server is down: so is this connection.
				c.reset()
				continue
			}
			c.server = server
		}
		p.mu.Lock()
		p.conns[c] = struct{}{}
		p.peak = max(p.peak, len(p.conns))
		p.mu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(c)
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
		}()
	}
}

// serve pumps both directions until either side ends, then closes both.
func (p *Proxy) serve(c *proxyConn) {
	if c.server == nil {
		// Accepted inside a black hole: swallow whatever the client sends.
		p.pump(c, c.client, nil, false)
		c.close()
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.pump(c, c.client, c.server, false); c.close() })
	wg.Go(func() { p.pump(c, c.server, c.client, true); c.close() })
	wg.Wait()
}

// pump copies src to dst (dst nil: nowhere), swallowing bytes inside a black
// hole and delaying replies (fromServer) by the latency.
func (p *Proxy) pump(c *proxyConn, src, dst net.Conn, fromServer bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			hole, latency := p.blackHole, p.latency
			p.mu.Unlock()
			switch {
			case hole || dst == nil:
				c.lost.Store(true)
			default:
				if fromServer && latency > 0 {
					select {
					case <-time.After(latency):
					case <-c.done:
						return
					}
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// reset closes the connection with an RST to the client.
func (c *proxyConn) reset() {
	if tcp, ok := c.client.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	c.close()
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		close(c.done)
		_ = c.client.Close()
		if c.server != nil {
			_ = c.server.Close()
		}
	})
}

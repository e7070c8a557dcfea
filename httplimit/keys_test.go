package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/httplimit"
)

// request builds a request from remote with the given header lines.
func request(remote string, header ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

func TestKeyByHeader(t *testing.T) {
	k := httplimit.KeyByHeader("X-User")
	got, err := k(request("192.0.2.1:1", "X-User", "alice"))
	require.NoError(t, err)
	require.Equal(t, "alice", got)
	_, err = k(request("192.0.2.1:1"))
	require.ErrorIs(t, err, httplimit.ErrNoKey)
	require.ErrorContains(t, err, "X-User")
	_, err = k(request("192.0.2.1:1", "X-User", ""))
	require.ErrorIs(t, err, httplimit.ErrNoKey, "an empty value is no key")
}

// KeyJoin keeps distinct tuples apart even when parts contain the
// separator.
func TestKeyJoin(t *testing.T) {
	k := httplimit.KeyJoin(httplimit.KeyConst("search"), httplimit.KeyByHeader("X-User"))
	got, err := k(request("192.0.2.1:1", "X-User", "alice"))
	require.NoError(t, err)
	require.Equal(t, "search:alice", got)
	_, err = k(request("192.0.2.1:1"))
	require.ErrorIs(t, err, httplimit.ErrNoKey, "a part's error is the error")

	a, err := httplimit.KeyJoin(httplimit.KeyConst("a:b"), httplimit.KeyConst("c"))(request("192.0.2.1:1"))
	require.NoError(t, err)
	b, err := httplimit.KeyJoin(httplimit.KeyConst("a"), httplimit.KeyConst("b:c"))(request("192.0.2.1:1"))
	require.NoError(t, err)
	require.Equal(t, "a%3Ab:c", a)
	require.Equal(t, "a:b%3Ac", b)
	pct, err := httplimit.KeyJoin(httplimit.KeyConst("a%3Ab"), httplimit.KeyConst("c"))(request("192.0.2.1:1"))
	require.NoError(t, err)
	require.NotEqual(t, a, pct, "a literal %3A is escaped too")

	_, err = httplimit.KeyJoin(httplimit.KeyConst("a"), nil)(request("192.0.2.1:1"))
	require.ErrorIs(t, err, httplimit.ErrNoKey, "a nil part is an error, not a panic")
}

// KeyByPattern reads the ServeMux pattern that routed the request.
func TestKeyByPattern(t *testing.T) {
	var got string
	var gotErr error
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) { got, gotErr = httplimit.KeyByPattern(r) })
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/items/7", nil))
	require.NoError(t, gotErr)
	require.Equal(t, "GET /items/{id}", got)
	_, err := httplimit.KeyByPattern(httptest.NewRequest(http.MethodGet, "/items/7", nil))
	require.ErrorIs(t, err, httplimit.ErrNoKey)
}

func TestKeyByClientIP(t *testing.T) {
	direct, err := httplimit.KeyByClientIP(httplimit.ClientIPConfig{})
	require.NoError(t, err)
	proxied, err := httplimit.KeyByClientIP(httplimit.ClientIPConfig{TrustedProxies: []string{"10.0.0.0/8", "2001:db8:ffff::1"}})
	require.NoError(t, err)
	forwarded, err := httplimit.KeyByClientIP(httplimit.ClientIPConfig{TrustedProxies: []string{"10.0.0.0/8"}, Header: httplimit.HeaderForwarded})
	require.NoError(t, err)
	coarse, err := httplimit.KeyByClientIP(httplimit.ClientIPConfig{IPv6PrefixLen: 48, IPv4PrefixLen: 24})
	require.NoError(t, err)
	mapped, err := httplimit.KeyByClientIP(httplimit.ClientIPConfig{TrustedProxies: []string{"::ffff:10.0.0.0/104"}})
	require.NoError(t, err)

	for _, c := range []struct {
		name string
		key  httplimit.KeyFunc
		r    *http.Request
		want string // "" for an error
	}{
		{"the peer", direct, request("203.0.113.7:5555"), "203.0.113.7"},
		{"a peer without a port", direct, request("203.0.113.7"), "203.0.113.7"},
		{"a spoofed X-Forwarded-For from an untrusted peer is ignored", direct,
			request("203.0.113.7:5555", "X-Forwarded-For", "198.51.100.1"), "203.0.113.7"},
		{"a spoofed Forwarded too", direct, request("203.0.113.7:5555", "Forwarded", "for=198.51.100.1"), "203.0.113.7"},
		{"a peer that is not a trusted proxy is the client, whatever it forwards", proxied,
			request("203.0.113.7:5555", "X-Forwarded-For", "198.51.100.1"), "203.0.113.7"},
		{"a trusted proxy's X-Forwarded-For is honoured", proxied,
			request("10.1.2.3:5555", "X-Forwarded-For", "198.51.100.1"), "198.51.100.1"},
		{"right to left: what the client wrote before the proxy appended is ignored", proxied,
			request("10.1.2.3:5555", "X-Forwarded-For", "192.0.2.99, 198.51.100.1"), "198.51.100.1"},
		{"past several trusted hops, over several header lines", proxied,
			request("10.1.2.3:5555", "X-Forwarded-For", "192.0.2.99, 198.51.100.1", "X-Forwarded-For", "10.9.9.9 ,10.8.8.8"), "198.51.100.1"},
		{"every hop trusted: the leftmost", proxied, request("10.1.2.3:5555", "X-Forwarded-For", "10.7.7.7, 10.8.8.8"), "10.7.7.7"},
		{"a trusted proxy without the header is itself the client", proxied, request("10.1.2.3:5555"), "10.1.2.3"},
		{"a trusted proxy given as an IPv4-mapped prefix matches", mapped,
			request("[::ffff:10.0.0.5]:443", "X-Forwarded-For", "198.51.100.1"), "198.51.100.1"},
		{"ports and brackets", proxied, request("[2001:db8:ffff::1]:443", "X-Forwarded-For", "[2001:db8:1:2:3:4:5:6]:8080"), "2001:db8:1:2::/64"},
		{"garbage from a trusted hop is an error", proxied, request("10.1.2.3:5555", "X-Forwarded-For", "198.51.100.1, not-an-ip"), ""},
		{"the header a proxy does not write is not read", proxied, request("10.1.2.3:5555", "Forwarded", "for=198.51.100.1"), "10.1.2.3"},
		{"Forwarded: quoted IPv6 with a port, other parameters", forwarded,
			request("10.1.2.3:5555", "Forwarded", `for=192.0.2.99, For="[2001:db8:cafe::17]:4711";proto=https;by=10.1.2.3`), "2001:db8:cafe::/64"},
		{"Forwarded: right to left over lines", forwarded,
			request("10.1.2.3:5555", "Forwarded", "for=198.51.100.1;proto=http", "Forwarded", "for=10.5.5.5"), "198.51.100.1"},
		{"Forwarded: a quoted comma does not split an element", forwarded,
			request("10.1.2.3:5555", "Forwarded", `for=198.51.100.1;ext="a,b"`), "198.51.100.1"},
		{"Forwarded: unknown from a trusted hop is an error", forwarded, request("10.1.2.3:5555", "Forwarded", "for=unknown"), ""},
		{"Forwarded: an element without for= is an error", forwarded, request("10.1.2.3:5555", "Forwarded", "proto=https"), ""},
		{"IPv6 is grouped by /64 by default", direct, request("[2001:db8:1:2:aaaa::1]:1"), "2001:db8:1:2::/64"},
		{"another address in the same /64 is the same client", direct, request("[2001:db8:1:2:bbbb::9]:1"), "2001:db8:1:2::/64"},
		{"an IPv4-mapped address is IPv4", direct, request("[::ffff:203.0.113.7]:1"), "203.0.113.7"},
		{"a zone is dropped", direct, request("[fe80::1%eth0]:1"), "fe80::/64"},
		{"custom IPv6 prefix", coarse, request("[2001:db8:1:2::1]:1"), "2001:db8:1::/48"},
		{"custom IPv4 prefix", coarse, request("203.0.113.7:1"), "203.0.113.0/24"},
		{"a RemoteAddr that is no IP", direct, request("pipe"), ""},
	} {
		got, err := c.key(c.r)
		if c.want == "" {
			require.ErrorIs(t, err, httplimit.ErrNoKey, c.name)
			continue
		}
		require.NoError(t, err, c.name)
		require.Equal(t, c.want, got, c.name)
	}
}

func TestKeyByClientIPRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]httplimit.ClientIPConfig{
		"bad proxy":       {TrustedProxies: []string{"10.0.0.0/33"}},
		"proxy hostname":  {TrustedProxies: []string{"proxy.internal"}},
		"unknown header":  {Header: "X-Real-IP"},
		"IPv6 prefix 129": {IPv6PrefixLen: 129},
		"IPv4 prefix -1":  {IPv4PrefixLen: -1},
	} {
		k, err := httplimit.KeyByClientIP(cfg)
		require.Nil(t, k, name)
		require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig, name)
	}
}

// Whatever the forwarding headers say, a peer that is not a trusted proxy is
// keyed by its own address, and a trusted one never yields a key that is
// neither the peer nor an address of the header. Seeds run with go test;
// go test -fuzz FuzzKeyByClientIP explores further.
func FuzzKeyByClientIP(f *testing.F) {
	f.Add("203.0.113.7:1", "198.51.100.1", `for=198.51.100.1`)
	f.Add("10.0.0.1:1", "198.51.100.1, 10.0.0.2", `for="[2001:db8::1]:80";proto=https, for=10.0.0.3`)
	f.Add("10.0.0.1:1", ",,,", `for="\`)
	f.Add("[::ffff:10.0.0.1]:1", "[2001:db8::1]:80, unknown", `for=_hidden;by=x, For=10.9.9.9`)
	keys := map[string]httplimit.KeyFunc{}
	for _, h := range []string{httplimit.HeaderXForwardedFor, httplimit.HeaderForwarded} {
		k, err := httplimit.KeyByClientIP(httplimit.ClientIPConfig{TrustedProxies: []string{"10.0.0.0/8"}, Header: h, IPv6PrefixLen: 128})
		require.NoError(f, err)
		keys[h] = k
	}
	f.Fuzz(func(t *testing.T, remote, xff, fwd string) {
		bare := request(remote)
		r := request(remote, "X-Forwarded-For", xff, "Forwarded", fwd)
		for h, key := range keys {
			got, err := key(r)
			peer, peerErr := key(bare)
			if peerErr != nil {
				require.Error(t, err, "no peer address, no key")
				continue
			}
			if !strings.HasPrefix(peer, "10.") {
				require.NoError(t, err)
				require.Equal(t, peer, got, "an untrusted peer (%s) is keyed by itself whatever %s says", remote, h)
				continue
			}
			if err == nil && got != peer {
				require.True(t, mentions(xff+" "+fwd, got), "%s: the key %s comes from the header", h, got)
			}
		}
	})
}

// mentions reports whether text contains an address equal to addr, in any
// of the spellings forwarding headers use.
func mentions(text, addr string) bool {
	want, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	for _, tok := range strings.FieldsFunc(text, func(r rune) bool { return unicode.IsSpace(r) || strings.ContainsRune(",;=\"", r) }) {
		a, err := netip.ParseAddr(strings.Trim(tok, "[]"))
		if err != nil {
			ap, perr := netip.ParseAddrPort(tok)
			if perr != nil {
				continue
			}
			a = ap.Addr()
		}
		if a.Unmap().WithZone("") == want {
			return true
		}
	}
	return false
}

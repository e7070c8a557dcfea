package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/fleetlimit/fleetlimit"
)

// KeyFunc names the client a request is charged to: a user id, an IP prefix,
// or a composition (KeyJoin). An error means the request cannot be
// identified; Middleware then answers 400 Bad Request, or lets the request
// through unlimited with WithKeyErrorPassThrough.
type KeyFunc func(*http.Request) (string, error)

// ErrNoKey is wrapped by the errors of the KeyFuncs in this package: the
// request does not carry what identifies its client.
var ErrNoKey = errors.New("httplimit: cannot identify the client")

// KeyByHeader keys requests by the value of header name, e.g. the user id
// that an authenticating proxy set. A request without the header (or with an
// empty value) is an error wrapping ErrNoKey. Only trust a header that your
// own infrastructure sets: a client can send any header it likes.
func KeyByHeader(name string) KeyFunc {
	missing := fmt.Errorf("%w: header %s is missing", ErrNoKey, name)
	return func(r *http.Request) (string, error) {
		if v := r.Header.Get(name); v != "" {
			return v, nil
		}
		return "", missing
	}
}

// KeyConst keys every request by the same string: one limit shared by all
// clients, or a fixed part of a composed key (KeyJoin(KeyConst("search"),
// KeyByHeader("X-User"))).
func KeyConst(s string) KeyFunc {
	return func(*http.Request) (string, error) { return s, nil }
}

// KeyByPattern keys requests by the net/http.ServeMux pattern that matched
// them, e.g. "GET /items/{id}": with KeyJoin, one limiter gives every route
// its own quota per client. A request not routed by a ServeMux pattern is an
// error wrapping ErrNoKey.
func KeyByPattern(r *http.Request) (string, error) {
	if r.Pattern == "" {
		return "", fmt.Errorf("%w: the request was not routed by a ServeMux pattern", ErrNoKey)
	}
	return r.Pattern, nil
}

// KeyJoin composes keys: each part's key, in order, joined by ":". A ':' or
// '%' inside a part is percent-encoded first, so that distinct tuples never
// share a key ("a:b"+"c" and "a"+"b:c" stay apart). The first part's error
// is the error.
func KeyJoin(parts ...KeyFunc) KeyFunc {
	for i, p := range parts {
		if p == nil {
			err := fmt.Errorf("%w: KeyJoin part %d is a nil KeyFunc", ErrNoKey, i)
			return func(*http.Request) (string, error) { return "", err }
		}
	}
	return func(r *http.Request) (string, error) {
		var b strings.Builder
		for i, p := range parts {
			k, err := p(r)
			if err != nil {
				return "", err
			}
			if i > 0 {
				b.WriteByte(':')
			}
			if strings.ContainsAny(k, ":%") {
				k = keyPartEscaper.Replace(k)
			}
			b.WriteString(k)
		}
		return b.String(), nil
	}
}

var keyPartEscaper = strings.NewReplacer("%", "%25", ":", "%3A")

// Forwarding headers that KeyByClientIP can read.
const (
	HeaderXForwardedFor = "X-Forwarded-For"
	HeaderForwarded     = "Forwarded" // RFC 7239
)

// ClientIPConfig configures KeyByClientIP. The zero value keys by the peer
// address alone (RemoteAddr), grouping IPv6 clients by /64.
type ClientIPConfig struct {
	// TrustedProxies are the proxies (CIDRs such as "10.0.0.0/8", or single
	// addresses) whose forwarding header is believed. Default: none, so
	// that only RemoteAddr counts and no header a client writes can buy it
	// a fresh quota.
	TrustedProxies []string
	// Header is the forwarding header your trusted proxies append to:
	// HeaderXForwardedFor (the default) or HeaderForwarded. Only one is
	// read: a proxy that appends to one passes the other through
	// untouched, so reading both would let a client forge an address.
	Header string
	// IPv6PrefixLen groups IPv6 clients: all addresses in one prefix of
	// this length are one client. Default (0): 64, because one subscriber
	// commonly gets a whole /64 (or more) and can pick any address in it.
	IPv6PrefixLen int
	// IPv4PrefixLen groups IPv4 clients likewise. Default (0): 32, one
	// address per client.
	IPv4PrefixLen int
}

// KeyByClientIP returns a KeyFunc keying requests by client IP address.
//
// The client is the peer (RemoteAddr) unless the peer is a trusted proxy.
// Then the forwarding header is read right to left, the order in which
// proxies appended to it, skipping trusted proxies: the first untrusted
// address is the client (the leftmost address if every hop is trusted, the
// peer if the header is absent). Entries left of the first untrusted address
// were written by whoever sent the request and are never read. A malformed
// entry reached in this walk (or "unknown", or an obfuscated Forwarded node)
// is an error wrapping ErrNoKey: a trusted proxy did not say who the client
// is.
//
// IPv4-mapped IPv6 addresses count as IPv4. The key is the address
// ("203.0.113.7") or, when grouping, its masked prefix ("2001:db8:1:2::/64").
//
// It returns an error wrapping fleetlimit.ErrInvalidConfig for an unparsable proxy, an
// unknown header or a prefix length out of range.
func KeyByClientIP(cfg ClientIPConfig) (KeyFunc, error) {
	c := &clientIP{v4: 32, v6: 64}
	var errs []error
	for _, s := range cfg.TrustedProxies {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				errs = append(errs, fmt.Errorf("trusted proxy %q is neither a CIDR nor an address", s))
				continue
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if a := p.Addr(); a.Is4In6() {
			// Peers are unmapped before matching, so unmap the prefix too:
			// ::ffff:10.0.0.0/104 is 10.0.0.0/8.
			if p.Bits() < 96 {
				errs = append(errs, fmt.Errorf("trusted proxy %q: an IPv4-mapped prefix must be at least /96", s))
				continue
			}
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		c.trusted = append(c.trusted, p.Masked())
	}
	switch cfg.Header {
	case "", HeaderXForwardedFor:
		c.header = HeaderXForwardedFor
	case HeaderForwarded:
		c.header, c.forwarded = HeaderForwarded, true
	default:
		errs = append(errs, fmt.Errorf("forwarding header %q, want %q or %q", cfg.Header, HeaderXForwardedFor, HeaderForwarded))
	}
	if cfg.IPv4PrefixLen != 0 {
		c.v4 = cfg.IPv4PrefixLen
	}
	if cfg.IPv6PrefixLen != 0 {
		c.v6 = cfg.IPv6PrefixLen
	}
	if c.v4 < 1 || c.v4 > 32 {
		errs = append(errs, fmt.Errorf("IPv4 prefix length %d, want 1 to 32", c.v4))
	}
	if c.v6 < 1 || c.v6 > 128 {
		errs = append(errs, fmt.Errorf("IPv6 prefix length %d, want 1 to 128", c.v6))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", fleetlimit.ErrInvalidConfig, errors.Join(errs...))
	}
	return c.key, nil
}

type clientIP struct {
	trusted   []netip.Prefix
	header    string
	forwarded bool // header is Forwarded, not X-Forwarded-For
	v4, v6    int
}

func (c *clientIP) key(r *http.Request) (string, error) {
	peer, ok := parseNode(r.RemoteAddr)
	if !ok {
		return "", fmt.Errorf("%w: RemoteAddr %q is not an IP address", ErrNoKey, r.RemoteAddr)
	}
	addr := peer
	if c.isTrusted(peer) {
		var err error
		if addr, err = c.fromHeader(r, peer); err != nil {
			return "", err
		}
	}
	return c.group(addr), nil
}

func (c *clientIP) isTrusted(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// fromHeader walks the forwarding header right to left past trusted hops.
// peer, a trusted proxy, is the answer when the header is absent.
func (c *clientIP) fromHeader(r *http.Request, peer netip.Addr) (netip.Addr, error) {
	lines := r.Header.Values(c.header)
	client := peer
	for i := len(lines) - 1; i >= 0; i-- {
		var entries []string
		if c.forwarded {
			entries = forwardedFor(lines[i])
		} else {
			entries = strings.Split(lines[i], ",")
		}
		for j := len(entries) - 1; j >= 0; j-- {
			a, ok := parseNode(entries[j])
			if !ok {
				return netip.Addr{}, fmt.Errorf("%w: %s entry %q from a trusted proxy is not an IP address", ErrNoKey, c.header, strings.TrimSpace(entries[j]))
			}
			client = a
			if !c.isTrusted(a) {
				return a, nil
			}
		}
	}
	return client, nil
}

// group returns the key of a: the address, or its prefix when grouping.
func (c *clientIP) group(a netip.Addr) string {
	bits := c.v6
	if a.Is4() {
		bits = c.v4
	}
	if bits == a.BitLen() {
		return a.String()
	}
	p, _ := a.Prefix(bits) // bits is within range for a's family
	return p.String()
}

// parseNode parses an address as forwarding headers and RemoteAddr write
// it: "192.0.2.1", "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]:80" or
// "[2001:db8::1]", optionally quoted. IPv4-mapped addresses are unmapped and
// zones dropped.
func parseNode(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		ap, perr := netip.ParseAddrPort(s)
		switch {
		case perr == nil:
			a = ap.Addr()
		case len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']':
			if a, err = netip.ParseAddr(s[1 : len(s)-1]); err != nil {
				return netip.Addr{}, false
			}
		default:
			return netip.Addr{}, false
		}
	}
	return a.Unmap().WithZone(""), true
}

// forwardedFor returns the for= value of each element of one Forwarded
// field line (RFC 7239: elements separated by commas, pairs by semicolons,
// values tokens or quoted strings), "" for an element without one.
func forwardedFor(line string) []string {
	var out []string
	elemFor := ""
	start, inQuote := 0, false
	pair := func(p string) {
		name, value, ok := strings.Cut(strings.TrimSpace(p), "=")
		if ok && strings.EqualFold(strings.TrimSpace(name), "for") {
			elemFor = strings.TrimSpace(value)
		}
	}
	for i := 0; i < len(line); i++ {
		switch ch := line[i]; {
		case ch == '\\' && inQuote:
			i++ // skip the escaped character
		case ch == '"':
			inQuote = !inQuote
		case (ch == ';' || ch == ',') && !inQuote:
			pair(line[start:i])
			start = i + 1
			if ch == ',' {
				out = append(out, elemFor)
				elemFor = ""
			}
		}
	}
	pair(line[start:])
	return append(out, elemFor)
}

package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/fleetlimit/fleetlimit/httplimit"
)

// KeyFunc names the client a call is charged to: a user id, an IP prefix,
// or a composition (KeyJoin). fullMethod is the call's method,
// "/package.Service/Method". An error means the call cannot be identified;
// the interceptor then answers codes.InvalidArgument, or lets the call
// through unlimited with WithKeyErrorPassThrough.
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// ErrNoKey is wrapped by the errors of the KeyFuncs in this package: the
// call does not carry what identifies its client.
var ErrNoKey = errors.New("grpclimit: cannot identify the client")

// KeyByMetadata keys calls by the first value of the request metadata key
// name (case-insensitive, as gRPC metadata keys are), e.g. the user id that
// an authenticating proxy set. A call without it (or with an empty value)
// is an error wrapping ErrNoKey. Only trust metadata that your own
// infrastructure sets: a client can send any metadata it likes.
func KeyByMetadata(name string) KeyFunc {
	name = strings.ToLower(name)
	missing := fmt.Errorf("%w: metadata %s is missing", ErrNoKey, name)
	return func(ctx context.Context, _ string) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get(name); len(v) > 0 && v[0] != "" {
			return v[0], nil
		}
		return "", missing
	}
}

// KeyByMethod keys calls by their full method, "/package.Service/Method":
// with KeyJoin, one limiter gives every method its own quota per client.
func KeyByMethod(_ context.Context, fullMethod string) (string, error) {
	if fullMethod == "" {
		return "", fmt.Errorf("%w: no method", ErrNoKey)
	}
	return fullMethod, nil
}

// KeyConst keys every call by the same string: one limit shared by all
// clients, or a fixed part of a composed key.
func KeyConst(s string) KeyFunc {
	return func(context.Context, string) (string, error) { return s, nil }
}

// KeyJoin composes keys: each part's key, in order, joined by ":". A ':' or
// '%' inside a part is percent-encoded first, so that distinct tuples never
// share a key (as httplimit.KeyJoin does). The first part's error is the
// error.
func KeyJoin(parts ...KeyFunc) KeyFunc {
	for i, p := range parts {
		if p == nil {
			err := fmt.Errorf("%w: KeyJoin part %d is a nil KeyFunc", ErrNoKey, i)
			return func(context.Context, string) (string, error) { return "", err }
		}
	}
	return func(ctx context.Context, method string) (string, error) {
		var b strings.Builder
		for i, p := range parts {
			k, err := p(ctx, method)
			if err != nil {
				return "", err
			}
			if i > 0 {
				b.WriteByte(':')
			}
			b.WriteString(keyPartEscaper.Replace(k))
		}
		return b.String(), nil
	}
}

var keyPartEscaper = strings.NewReplacer("%", "%25", ":", "%3A")

// KeyByPeer returns a KeyFunc keying calls by client IP address, by the
// rules of httplimit.KeyByClientIP, applied by that very code: the client
// is the peer (the connection's remote address) unless the peer is one of
// cfg.TrustedProxies; then the forwarding metadata (x-forwarded-for, or
// forwarded when cfg.Header is httplimit.HeaderForwarded) is read right to
// left, skipping trusted proxies, and the first untrusted address is the
// client. Nothing a client writes in metadata is believed unless a trusted
// proxy connected. IPv6 clients are grouped by /64 unless cfg says
// otherwise.
//
// A peer that is not an IP address (a Unix socket, an in-memory listener)
// is an error wrapping ErrNoKey. KeyByPeer returns an error wrapping
// fleetlimit.ErrInvalidConfig for an invalid cfg.
func KeyByPeer(cfg httplimit.ClientIPConfig) (KeyFunc, error) {
	byIP, err := httplimit.KeyByClientIP(cfg)
	if err != nil {
		return nil, err
	}
	header := httplimit.HeaderXForwardedFor
	if cfg.Header != "" {
		header = cfg.Header
	}
	mdKey := strings.ToLower(header)
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", fmt.Errorf("%w: the call has no peer", ErrNoKey)
		}
		// The call as httplimit's KeyFunc reads a request: the peer's
		// address, and the forwarding metadata as the header's lines.
		r := &http.Request{RemoteAddr: p.Addr.String(), Header: http.Header{}}
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get(mdKey); len(v) > 0 {
			r.Header[http.CanonicalHeaderKey(header)] = v
		}
		k, err := byIP(r)
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrNoKey, err)
		}
		return k, nil
	}, nil
}

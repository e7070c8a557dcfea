// Package httplimit puts a fleetlimit.Limiter in front of net/http handlers.
//
// Middleware charges every request to the client a KeyFunc names
// (KeyByHeader, KeyByClientIP behind trusted proxies, KeyByPattern, KeyJoin)
// and answers with X-RateLimit-* headers, the IETF draft RateLimit and
// RateLimit-Policy fields, 429 with Retry-After when denied, 503 when a
// fail-closed limiter's store is down, and 499 (never the handler) when the
// client went away before the decision. Per-endpoint limits are one Limiter
// per handler:
//
//	clientIP, err := httplimit.KeyByClientIP(httplimit.ClientIPConfig{TrustedProxies: []string{"10.0.0.0/8"}})
//	mux.Handle("POST /login", httplimit.Middleware(login, clientIP)(loginHandler))
//
// The package uses only the exported API of package fleetlimit: it is also
// the model for other adapters (gRPC, queue consumers).
package httplimit

// Package ratelimitheader formats a fleetlimit decision as the rate-limit
// fields clients read, once for every adapter: the IETF draft fields
// RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers-10),
// and the whole seconds of Retry-After and X-RateLimit-Reset. Package
// httplimit writes them as HTTP header fields, package grpclimit as
// response metadata (ratelimit-policy, ratelimit).
//
// It knows neither HTTP nor gRPC: it turns a limiter's name, limit and
// window, and a fleetlimit.Result, into field values.
package ratelimitheader

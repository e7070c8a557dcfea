// Package store executes fleetlimit's strategies atomically, one decision at a
// time, against state that is either shared by a whole fleet (Redis) or held
// by one process (Memory).
//
// A Store knows nothing about algorithms: it runs whatever Strategy a Request
// carries. Redis runs the strategy's Lua twin as one EVALSHA per decision
// (falling back to EVAL when the server has lost its script cache), on any
// go-redis UniversalClient: standalone, Sentinel-backed or Cluster. Memory
// runs the Go rule under a per-key lock, in sharded maps, and sweeps idle keys.
//
// Memory is for one process: N instances behind a load balancer each with
// their own Memory admit N times the limit. Share state through Redis for a
// fleet.
//
// New stores prove themselves with the conformance suite in package
// store/storetest.
package store

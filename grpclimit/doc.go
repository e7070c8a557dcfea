// Package grpclimit puts a fleetlimit.Limiter in front of gRPC servers:
// unary and stream server interceptors, with the same answers as package
// httplimit gives over HTTP, in gRPC's terms.
//
// Each call is charged to the client a KeyFunc names (KeyByPeer behind
// trusted proxies, KeyByMetadata, KeyByMethod, KeyConst, KeyJoin); a stream
// is charged once, when it opens. A denial is codes.ResourceExhausted with a
// google.rpc.RetryInfo detail holding the exact wait (which gRPC clients and
// retry policies read), and every decision the store made sends the IETF
// draft fields as response metadata: ratelimit-policy ("name";q=100;w=60)
// and ratelimit ("name";r=42;t=18). While the store is down, a fail-closed
// limiter answers codes.Unavailable, also with RetryInfo. A caller whose
// context is done before the decision gets codes.Canceled or
// codes.DeadlineExceeded, and the handler never runs.
//
//	login, _ := grpclimit.KeyByPeer(httplimit.ClientIPConfig{TrustedProxies: []string{"10.0.0.0/8"}})
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(
//			grpclimit.UnaryServerInterceptor(global, grpclimit.KeyByMetadata("x-user")),
//			grpclimit.UnaryServerInterceptor(loginLimiter, login, grpclimit.ForMethods("/auth.Auth/Login")),
//		),
//		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(global, grpclimit.KeyByMetadata("x-user"))),
//	)
//
// Per-method limits are one interceptor per limiter, each given the methods
// it limits (ForMethods); chained interceptors each add their member to the
// ratelimit and ratelimit-policy metadata, which the draft defines as lists.
//
// The package uses only the exported API of package fleetlimit, and lives
// in a module of its own so that users of fleetlimit who do not serve gRPC
// never download grpc-go.
package grpclimit

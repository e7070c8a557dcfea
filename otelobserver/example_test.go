package otelobserver_test

import (
	"context"
	"fmt"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/otelobserver"
	"github.com/fleetlimit/fleetlimit/store"
)

// One Observer on the application's MeterProvider, given to every
// limiter. Here the provider has an in-memory reader; in a service it has
// the exporter's (OTLP, Prometheus, stdout).
func Example() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()

	obs, err := otelobserver.New(mp)
	if err != nil {
		panic(err)
	}
	st := store.NewMemory() // stands in for store.NewRedis
	defer st.Close()
	login, err := fleetlimit.New(algorithm.FixedWindow(2, time.Minute), st,
		fleetlimit.WithName("login"), fleetlimit.WithObserver(obs))
	if err != nil {
		panic(err)
	}
	for range 3 {
		if _, err := login.Allow(context.Background(), "203.0.113.7"); err != nil {
			panic(err)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "fleetlimit.decisions" {
			continue
		}
		for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
			result, _ := p.Attributes.Value(otelobserver.ResultKey)
			limiter, _ := p.Attributes.Value(otelobserver.LimiterKey)
			fmt.Printf("%s %s{limiter=%s, result=%s}: %d\n", m.Name, m.Unit, limiter.AsString(), result.AsString(), p.Value)
		}
	}
	// Unordered output:
	// fleetlimit.decisions {decision}{limiter=login, result=allowed}: 2
	// fleetlimit.decisions {decision}{limiter=login, result=denied}: 1
}

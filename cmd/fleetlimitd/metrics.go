package main

import (
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are fleetlimitd's own series, beside promobserver's per-rule
// decision series (labelled by limiter: the domain and the rule's path,
// configuration text, never a request's value). Every label here takes
// values from a fixed set.
type metrics struct {
	requests *prometheus.CounterVec // code: ok, over_limit, error
	reloads  *prometheus.CounterVec // result: success, error
	rules    prometheus.Gauge
	inFlight prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: counter("fleetlimitd_requests_total", "ShouldRateLimit calls answered, by overall code (error: answered with a gRPC error).", "code"),
		reloads:  counter("fleetlimitd_config_loads_total", "Configuration loads, at start and on change; after an error the last good configuration stays in force.", "result"),
		rules:    gauge("fleetlimitd_config_rules", "Rate limits (rules) in the configuration in force."),
		inFlight: gauge("fleetlimitd_requests_in_flight", "ShouldRateLimit calls being answered."),
	}
	for _, c := range []prometheus.Collector{m.requests, m.reloads, m.rules, m.inFlight} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// counter is a counter vector named name, labelled by label.
func counter(name, help, label string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
}

// gauge is a gauge named name.
func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// answered counts one ShouldRateLimit answer.
func (m *metrics) answered(resp *rlspb.RateLimitResponse, err error) {
	switch {
	case err != nil:
		m.requests.WithLabelValues("error").Inc()
	case resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT:
		m.requests.WithLabelValues("over_limit").Inc()
	default:
		m.requests.WithLabelValues("ok").Inc()
	}
}

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
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetlimitd_requests_total",
			Help: "ShouldRateLimit calls answered, by overall code (error: answered with a gRPC error).",
		}, []string{"code"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetlimitd_config_loads_total",
			Help: "Configuration loads, at start and on change; after an error the last good configuration stays in force.",
		}, []string{"result"}),
		rules: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleetlimitd_config_rules",
			Help: "Rate limits (rules) in the configuration in force.",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleetlimitd_requests_in_flight",
			Help: "ShouldRateLimit calls being answered.",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.reloads, m.rules, m.inFlight} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
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

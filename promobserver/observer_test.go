package promobserver_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/internal/observertest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/promobserver"
	"github.com/fleetlimit/fleetlimit/store"
)

// scrape fetches reg's metrics through promhttp, as Prometheus would, and
// returns every sample as "name{label="value",...}" -> value, histograms
// as their _count and _bucket series.
func scrape(t *testing.T, reg *prometheus.Registry) (map[string]float64, string) {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	require.NoError(t, err, "%s", body)
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			series := func(suffix string, extra ...string) string {
				var ls []string
				for _, l := range m.GetLabel() {
					ls = append(ls, l.GetName()+`="`+l.GetValue()+`"`)
				}
				ls = append(ls, extra...)
				sort.Strings(ls)
				return name + suffix + "{" + strings.Join(ls, ",") + "}"
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[series("")] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[series("")] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out[series("_count")] = float64(h.GetSampleCount())
				for _, b := range h.GetBucket() {
					out[series("_bucket", `le="`+model.FloatString(b.GetUpperBound()).String()+`"`)] = float64(b.GetCumulativeCount())
				}
			}
		}
	}
	return out, string(body)
}

// After the known sequence of decisions of observertest.Run — enforcing
// on a healthy store (memory, then the real redis-server), fail-closed
// with its breaker opening and fail-open on a dead one, a caller gone, bad
// input, a shadow limiter, leases with a denial cache, no breaker — the
// scraped series say exactly what happened, and no client key appears in
// them.
func TestObserverScrape(t *testing.T) {
	all := map[string]store.Store{"memory": stores.Memory(t)}
	if redistest.HaveReal(t) {
		all["redis"] = stores.Redis(t, redistest.Real(t))
	}
	for storeName, st := range all {
		t.Run(storeName, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			obs, err := promobserver.New(reg)
			require.NoError(t, err)
			_, err = promobserver.New(reg)
			require.Error(t, err, "the metrics are registered once per registry")
			observertest.Run(t, st, obs)

			got, body := scrape(t, reg)
			require.NotContains(t, body, observertest.Key, "the client's key is never a label")
			want := map[string]float64{
				`fleetlimit_decisions_total{limiter="api",outcome="allowed"}`:          2,
				`fleetlimit_decisions_total{limiter="api",outcome="denied"}`:           2,
				`fleetlimit_decisions_total{limiter="api",outcome="degraded-allowed"}`: 0,
				`fleetlimit_decisions_total{limiter="api",outcome="degraded-denied"}`:  0,
				`fleetlimit_decisions_total{limiter="api",outcome="caller-gone"}`:      1,
				`fleetlimit_cost_total{limiter="api",result="admitted"}`:               3,
				`fleetlimit_cost_total{limiter="api",result="denied"}`:                 6, // 1 + 4 + the caller gone's 1
				`fleetlimit_shadow_admissions_total{limiter="api"}`:                    0,
				`fleetlimit_decision_duration_seconds_count{limiter="api"}`:            5,
				`fleetlimit_breaker_state{limiter="api"}`:                              0,

				`fleetlimit_decisions_total{limiter="login",outcome="allowed"}`:          0,
				`fleetlimit_decisions_total{limiter="login",outcome="denied"}`:           0,
				`fleetlimit_decisions_total{limiter="login",outcome="degraded-allowed"}`: 0,
				`fleetlimit_decisions_total{limiter="login",outcome="degraded-denied"}`:  2,
				`fleetlimit_decisions_total{limiter="login",outcome="caller-gone"}`:      0,
				`fleetlimit_cost_total{limiter="login",result="admitted"}`:               0,
				`fleetlimit_cost_total{limiter="login",result="denied"}`:                 2,
				`fleetlimit_shadow_admissions_total{limiter="login"}`:                    0,
				`fleetlimit_decision_duration_seconds_count{limiter="login"}`:            2,
				`fleetlimit_store_errors_total{cause="unavailable",limiter="login"}`:     1,
				`fleetlimit_store_errors_total{cause="circuit-open",limiter="login"}`:    1,
				`fleetlimit_breaker_state{limiter="login"}`:                              2,

				`fleetlimit_decisions_total{limiter="search",outcome="allowed"}`:          0,
				`fleetlimit_decisions_total{limiter="search",outcome="denied"}`:           0,
				`fleetlimit_decisions_total{limiter="search",outcome="degraded-allowed"}`: 1,
				`fleetlimit_decisions_total{limiter="search",outcome="degraded-denied"}`:  0,
				`fleetlimit_decisions_total{limiter="search",outcome="caller-gone"}`:      0,
				`fleetlimit_cost_total{limiter="search",result="admitted"}`:               1,
				`fleetlimit_cost_total{limiter="search",result="denied"}`:                 0,
				`fleetlimit_shadow_admissions_total{limiter="search"}`:                    0,
				`fleetlimit_decision_duration_seconds_count{limiter="search"}`:            1,
				`fleetlimit_store_errors_total{cause="unavailable",limiter="search"}`:     1,
				`fleetlimit_breaker_state{limiter="search"}`:                              0,

				`fleetlimit_decisions_total{limiter="rollout",outcome="allowed"}`:          3,
				`fleetlimit_decisions_total{limiter="rollout",outcome="denied"}`:           2,
				`fleetlimit_decisions_total{limiter="rollout",outcome="degraded-allowed"}`: 0,
				`fleetlimit_decisions_total{limiter="rollout",outcome="degraded-denied"}`:  0,
				`fleetlimit_decisions_total{limiter="rollout",outcome="caller-gone"}`:      0,
				`fleetlimit_cost_total{limiter="rollout",result="admitted"}`:               3,
				`fleetlimit_cost_total{limiter="rollout",result="denied"}`:                 2,
				`fleetlimit_shadow_admissions_total{limiter="rollout"}`:                    2,
				`fleetlimit_decision_duration_seconds_count{limiter="rollout"}`:            5,
				`fleetlimit_breaker_state{limiter="rollout"}`:                              0,

				`fleetlimit_decisions_total{limiter="leased",outcome="allowed"}`:          8,
				`fleetlimit_decisions_total{limiter="leased",outcome="denied"}`:           2,
				`fleetlimit_decisions_total{limiter="leased",outcome="degraded-allowed"}`: 0,
				`fleetlimit_decisions_total{limiter="leased",outcome="degraded-denied"}`:  0,
				`fleetlimit_decisions_total{limiter="leased",outcome="caller-gone"}`:      0,
				`fleetlimit_cost_total{limiter="leased",result="admitted"}`:               8,
				`fleetlimit_cost_total{limiter="leased",result="denied"}`:                 2,
				`fleetlimit_shadow_admissions_total{limiter="leased"}`:                    0,
				`fleetlimit_decision_duration_seconds_count{limiter="leased"}`:            10,
				`fleetlimit_breaker_state{limiter="leased"}`:                              0,
				`fleetlimit_local_decisions_total{by="lease",limiter="leased"}`:           3,
				`fleetlimit_local_decisions_total{by="cache",limiter="leased"}`:           1,

				// No breaker, no breaker gauge.
				`fleetlimit_decisions_total{limiter="bare",outcome="allowed"}`:          1,
				`fleetlimit_decisions_total{limiter="bare",outcome="denied"}`:           0,
				`fleetlimit_decisions_total{limiter="bare",outcome="degraded-allowed"}`: 0,
				`fleetlimit_decisions_total{limiter="bare",outcome="degraded-denied"}`:  0,
				`fleetlimit_decisions_total{limiter="bare",outcome="caller-gone"}`:      0,
				`fleetlimit_cost_total{limiter="bare",result="admitted"}`:               2,
				`fleetlimit_cost_total{limiter="bare",result="denied"}`:                 0,
				`fleetlimit_shadow_admissions_total{limiter="bare"}`:                    0,
				`fleetlimit_decision_duration_seconds_count{limiter="bare"}`:            1,
			}
			for _, name := range []string{"api", "login", "search", "rollout", "bare"} {
				for _, by := range []string{"lease", "cache"} {
					want[fmt.Sprintf(`fleetlimit_local_decisions_total{by=%q,limiter=%q}`, by, name)] = 0
				}
			}
			// The permit operations, counted apart: their limiters made no
			// decision.
			permitOps := map[string]map[string][5]float64{ // limiter -> op -> by outcome
				"permits": {
					"acquire": {2, 1, 0, 0, 0},
					"release": {3, 0, 0, 0, 0},
					"renew":   {1, 1, 0, 0, 0}, // the second: expired (released)
				},
				"permits-down": {
					"acquire": {0, 0, 1, 0, 0}, // by the fallback, with a store error
					"release": {1, 0, 0, 0, 0}, // in the fallback, no error
					"renew":   {0, 0, 0, 0, 0},
				},
			}
			outcomes := []string{"allowed", "denied", "degraded-allowed", "degraded-denied", "caller-gone"}
			for name, ops := range permitOps {
				for op, counts := range ops {
					for i, out := range outcomes {
						want[fmt.Sprintf(`fleetlimit_permit_operations_total{limiter=%q,op=%q,outcome=%q}`, name, op, out)] = counts[i]
					}
				}
				for _, out := range outcomes {
					want[fmt.Sprintf(`fleetlimit_decisions_total{limiter=%q,outcome=%q}`, name, out)] = 0
				}
				for _, r := range []string{"admitted", "denied"} {
					want[fmt.Sprintf(`fleetlimit_cost_total{limiter=%q,result=%q}`, name, r)] = 0
				}
				for _, by := range []string{"lease", "cache"} {
					want[fmt.Sprintf(`fleetlimit_local_decisions_total{by=%q,limiter=%q}`, by, name)] = 0
				}
				want[fmt.Sprintf(`fleetlimit_shadow_admissions_total{limiter=%q}`, name)] = 0
				want[fmt.Sprintf(`fleetlimit_decision_duration_seconds_count{limiter=%q}`, name)] = 0
				want[fmt.Sprintf(`fleetlimit_breaker_state{limiter=%q}`, name)] = 0
			}
			for series, v := range want {
				require.Contains(t, got, series, "series missing from the scrape:\n%s", body)
				require.Equal(t, v, got[series], series)
			}
			// Every series scraped is one listed above, or a histogram bucket.
			for series := range got {
				if strings.HasPrefix(series, "fleetlimit_decision_duration_seconds_bucket") {
					continue
				}
				require.Contains(t, want, series, "an unexpected series")
			}
			// The buckets: 50µs to 100ms, cumulative up to the count.
			var les []string
			for series, v := range got {
				if strings.HasPrefix(series, `fleetlimit_decision_duration_seconds_bucket{le=`) && strings.HasSuffix(series, `limiter="api"}`) {
					les = append(les, strings.Split(series, `"`)[1])
					require.LessOrEqual(t, v, float64(5))
				}
			}
			sort.Strings(les)
			require.Equal(t, []string{"+Inf", "0.00005", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1"}, les)
			require.Equal(t, float64(5), got[`fleetlimit_decision_duration_seconds_bucket{le="+Inf",limiter="api"}`])
		})
	}
}

// A nil Registerer is a configuration error.
func TestNewRejectsNilRegisterer(t *testing.T) {
	_, err := promobserver.New(nil)
	require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig)
}

// A partial grant counts its grant as admitted cost and the rest of n as
// denied (fleetlimit.Event.Cost); a settle counts the units it charged
// past the estimate, and a cancel's units given back are no cost (a
// negative Add would panic the counter).
func TestObserverCountsGrantsAndSettles(t *testing.T) {
	reg := prometheus.NewRegistry()
	obs, err := promobserver.New(reg)
	require.NoError(t, err)
	observertest.GrantsAndSettles(t, obs)

	got, _ := scrape(t, reg)
	require.Equal(t, float64(4+6+5+3+2), got[`fleetlimit_cost_total{limiter="grants",result="admitted"}`])
	require.Equal(t, float64(4), got[`fleetlimit_cost_total{limiter="grants",result="denied"}`])
	// Two grants and two reservations are decisions; the cancel and the
	// settle are not.
	require.Equal(t, float64(4), got[`fleetlimit_decisions_total{limiter="grants",outcome="allowed"}`])
	require.Equal(t, float64(4), got[`fleetlimit_decision_duration_seconds_count{limiter="grants"}`])
}

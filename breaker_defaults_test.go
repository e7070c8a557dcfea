package fleetlimit

import "testing"

// TestDefaultBreakerConfigIsTheZeroConfig: the defaults spelled out build
// the breaker the zero config builds.
func TestDefaultBreakerConfigIsTheZeroConfig(t *testing.T) {
	zero, err := NewBreaker(BreakerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	spelled, err := NewBreaker(DefaultBreakerConfig())
	if err != nil {
		t.Fatal(err)
	}
	type figures struct {
		minFailures                         int64
		ratio, jitter                       float64
		minOutage, forget, probe, base, cap any
	}
	of := func(b *Breaker) figures {
		return figures{b.minFailures, b.ratio, b.jitter, b.minOutage, b.forget, b.probeTimeout, b.base, b.cap}
	}
	if of(zero) != of(spelled) {
		t.Errorf("zero config %+v, spelled out %+v", of(zero), of(spelled))
	}
}

package proptest

import (
	"fmt"
	"time"
)

// OutcomesByKey groups outcomes by key, keeping their order.
func OutcomesByKey(outs []Outcome) map[string][]Outcome {
	m := make(map[string][]Outcome)
	for _, o := range outs {
		m[o.Key] = append(m[o.Key], o)
	}
	return m
}

// MaxAdmittedIn returns the most cost admitted to one key in any half-open
// interval of length w, and the first and last admission of that interval.
// outs must be sorted by time; refunds are not admissions.
func MaxAdmittedIn(outs []Outcome, w time.Duration) (most int64, from, to time.Time) {
	for _, ko := range OutcomesByKey(outs) {
		var adm []Outcome
		for _, o := range ko {
			if o.Res.Allowed && !o.Refund {
				adm = append(adm, o)
			}
		}
		for i, a := range adm {
			var sum int64
			last := a.At
			for _, b := range adm[i:] {
				if !b.At.Before(a.At.Add(w)) {
					break
				}
				sum += b.N
				last = b.At
			}
			if sum > most {
				most, from, to = sum, a.At, last
			}
		}
	}
	return most, from, to
}

// TokenBucketBound reports a key that admitted more than burst + rate·d/per
// within some interval d (checked as sum·per <= burst·per + rate·d over
// every pair of its admissions, in integer microseconds), or "".
func TokenBucketBound(outs []Outcome, rate int64, per time.Duration, burst int64) string {
	p := per.Microseconds()
	for key, ko := range OutcomesByKey(outs) {
		var adm []Outcome
		for _, o := range ko {
			if o.Res.Allowed {
				adm = append(adm, o)
			}
		}
		for i := range adm {
			var sum int64
			for j := i; j < len(adm); j++ {
				sum += adm[j].N
				d := adm[j].At.UnixMicro() - adm[i].At.UnixMicro()
				if sum*p > burst*p+rate*d {
					return fmt.Sprintf("key %q: admitted %d within %v, more than burst %d + rate*d/per = %.3f",
						key, sum, adm[j].At.Sub(adm[i].At), burst, float64(burst)+float64(rate*d)/float64(p))
				}
			}
		}
	}
	return ""
}

package proptest

import "time"

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

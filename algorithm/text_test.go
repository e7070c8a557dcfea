package algorithm_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/rule"
)

// TestParseFormat: each rule's text form reads as the strategy its
// constructor builds, and Format writes it back in the canonical form.
func TestParseFormat(t *testing.T) {
	tb := algorithm.TokenBucket(10, time.Second, 20)
	swc := algorithm.SlidingWindowCounter(1000, 24*time.Hour)
	pen := algorithm.Penalty{After: 3, Within: time.Minute, Ban: 10 * time.Second, MaxBan: time.Hour}
	for _, c := range []struct {
		in, canonical string
		want          algorithm.Strategy
	}{
		{"sliding_window_log 100/1m", "sliding_window_log 100/1m", algorithm.SlidingWindowLog(100, time.Minute)},
		{"token_bucket 10/1s burst 20", "token_bucket 10/1s burst 20", tb},
		// burst defaults to the rate.
		{"token_bucket 5/1m", "token_bucket 5/1m burst 5", algorithm.TokenBucket(5, time.Minute, 5)},
		{"fixed_window 100/1h", "fixed_window 100/1h", algorithm.FixedWindow(100, time.Hour)},
		// Go's durations and days are read; the largest whole unit is written.
		{"sliding_window_counter 1000/1d", "sliding_window_counter 1000/24h", swc},
		{"fixed_window 7/1m30s", "fixed_window 7/90s", algorithm.FixedWindow(7, 90*time.Second)},
		{"fixed_window 7/1.5ms", "fixed_window 7/1500us", algorithm.FixedWindow(7, 1500*time.Microsecond)},
		{"  all( token_bucket 10/1s burst 20 ,sliding_window_counter 1000/24h )  ",
			"all(token_bucket 10/1s burst 20, sliding_window_counter 1000/24h)", algorithm.All(tb, swc)},
		{"penalize(sliding_window_log 5/1s, after 3 within 1m ban 10s max 1h)",
			"penalize(sliding_window_log 5/1s, after 3 within 1m ban 10s max 1h)", algorithm.Penalize(algorithm.SlidingWindowLog(5, time.Second), pen)},
		{"penalize(all(token_bucket 10/1s burst 20, sliding_window_counter 1000/24h), after 3 within 1m ban 10s max 1h)",
			"penalize(all(token_bucket 10/1s burst 20, sliding_window_counter 1000/24h), after 3 within 1m ban 10s max 1h)",
			algorithm.Penalize(algorithm.All(tb, swc), pen)},
		{"unlimited", "unlimited", algorithm.Unlimited()},
	} {
		s, err := algorithm.Parse(c.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.in, err)
			continue
		}
		if !rule.Same(s, c.want) {
			t.Errorf("Parse(%q) = %s, want %s", c.in, rule.ID(s), rule.ID(c.want))
		}
		if got, err := algorithm.Format(s); err != nil || got != c.canonical {
			t.Errorf("Format(Parse(%q)) = %q, %v; want %q", c.in, got, err, c.canonical)
		}
		if got := s.(interface{ String() string }).String(); got != c.canonical {
			t.Errorf("Parse(%q).String() = %q, want %q", c.in, got, c.canonical)
		}
	}
}

// TestParseErrors: text that is not a rule, and rules with invalid
// parameters, are errors wrapping ErrInvalidStrategy; syntax errors say
// where reading stopped.
func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		in     string
		offset int // -1: not a syntax error but the strategy's Validate
		msg    string
	}{
		{"", 0, "want a rule"},
		{"sliding_window 100/1m", 0, "unknown algorithm"},
		{"sliding_window_log 100", 22, `want "/"`},
		{"sliding_window_log 100/", 23, "want a window"},
		{"sliding_window_log x/1m", 19, "want a limit"},
		{"sliding_window_log -1/1m", 19, "want a limit"},
		{"sliding_window_log 100/1parsec", 23, "want a window"},
		{"sliding_window_log 99999999999999999999/1m", 19, "above 2^53"},
		{"token_bucket 10/1s burst", 24, "want a burst"},
		{"fixed_window 1/1m extra", 18, "unexpected"},
		{"all(fixed_window 1/1m; fixed_window 2/1h)", 21, `want "," or ")"`},
		{"all(fixed_window 1/1m", 21, `want "," or ")"`},
		{"penalize(fixed_window 1/1m, after 3 within 1m ban 10s)", 53, `want "max"`},
		{"penalize(fixed_window 1/1m after 3)", 27, `want ","`},
		// Read, but invalid: the strategy's own error.
		{"sliding_window_log 0/1m", -1, "limit must be between 1 and 2^53"},
		{"fixed_window 1/1ns", -1, "window must be between"},
		{"all(fixed_window 1/1m, fixed_window 1/1m)", -1, "same rule"},
		{"all(unlimited)", -1, "honour the peek flag"},
		{"penalize(fixed_window 1/1m, after 3 within 1m ban 1h max 1m)", -1, "shorter than the first ban"},
	} {
		s, err := algorithm.Parse(c.in)
		if err == nil {
			t.Errorf("Parse(%q) = %v, want an error", c.in, s)
			continue
		}
		if !errors.Is(err, algorithm.ErrInvalidStrategy) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Parse(%q): %v; want ErrInvalidStrategy and %q", c.in, err, c.msg)
		}
		var se *algorithm.SyntaxError
		switch {
		case c.offset < 0 && errors.As(err, &se):
			t.Errorf("Parse(%q): %v; want the strategy's error, not a syntax error", c.in, err)
		case c.offset >= 0 && (!errors.As(err, &se) || se.Offset != c.offset):
			t.Errorf("Parse(%q): %v; want a syntax error at offset %d", c.in, err, c.offset)
		}
	}
}

// TestFormatRefuses: a strategy the package did not build, or an invalid
// one, has no text form.
func TestFormatRefuses(t *testing.T) {
	if _, err := algorithm.Format(custom{algorithm.FixedWindow(1, time.Second)}); !errors.Is(err, algorithm.ErrNoTextForm) {
		t.Errorf("Format(custom): %v, want ErrNoTextForm", err)
	}
	if _, err := algorithm.Format(nil); !errors.Is(err, algorithm.ErrNoTextForm) {
		t.Errorf("Format(nil): %v, want ErrNoTextForm", err)
	}
	if _, err := algorithm.Format(algorithm.FixedWindow(0, time.Second)); !errors.Is(err, algorithm.ErrInvalidStrategy) {
		t.Errorf("Format(invalid): %v, want ErrInvalidStrategy", err)
	}
}

type custom struct{ algorithm.Strategy }

// roundTrips checks Parse(Format(s)) is the same rule as s, and that
// Format is a fixed point.
func roundTrips(t *testing.T, s algorithm.Strategy) {
	t.Helper()
	text, err := algorithm.Format(s)
	if err != nil {
		t.Fatalf("Format(%s): %v", rule.ID(s), err)
	}
	back, err := algorithm.Parse(text)
	if err != nil {
		t.Fatalf("Parse(Format(%s)) = Parse(%q): %v", rule.ID(s), text, err)
	}
	if !rule.Same(s, back) && !(algorithm.IsUnlimited(s) && algorithm.IsUnlimited(back)) {
		t.Fatalf("Parse(%q) = %s, want %s", text, rule.ID(back), rule.ID(s))
	}
	if again, _ := algorithm.Format(back); again != text {
		t.Fatalf("Format(Parse(%q)) = %q", text, again)
	}
}

// TestPropertyFormatParseRegistry: every Registry strategy over a spread
// of limits and windows, each pair of them as a composite, and each in a
// penalty box, round-trips through its text form.
func TestPropertyFormatParseRegistry(t *testing.T) {
	limits := []int64{1, 2, 7, 100, 1_000_003, algorithm.MaxInt - 1}
	windows := []time.Duration{time.Millisecond, 1500 * time.Microsecond, time.Second, 90 * time.Second,
		time.Hour, 36 * time.Hour, 7 * 24 * time.Hour, algorithm.MaxWindow, 1234567 * time.Microsecond}
	pen := algorithm.Penalty{After: 2, Within: time.Minute, Ban: time.Second, MaxBan: 24 * time.Hour}
	n := 0
	for _, e := range algorithm.Registry() {
		for _, l := range limits {
			for _, w := range windows {
				s := e.New(l, w)
				if s.Validate() != nil {
					continue // e.g. a token bucket whose units pass 2^53
				}
				roundTrips(t, s)
				if p := algorithm.Penalize(s, pen); p.Validate() == nil {
					roundTrips(t, p)
				}
				n++
			}
		}
	}
	for i, a := range algorithm.Registry() {
		for _, b := range algorithm.Registry()[i:] {
			c := algorithm.All(a.New(10, time.Second), b.New(1000, 24*time.Hour))
			roundTrips(t, c)
			roundTrips(t, algorithm.Penalize(c, pen))
			n++
		}
	}
	roundTrips(t, algorithm.TokenBucket(3, 7*time.Second, 11))
	roundTrips(t, algorithm.Unlimited())
	if n < 100 {
		t.Fatalf("only %d strategies round-tripped", n)
	}
}

// FuzzParseFormat: Parse never panics; whatever it accepts is valid and
// round-trips through Format to the same rule, and Format is a fixed point.
func FuzzParseFormat(f *testing.F) {
	for _, s := range []string{
		"sliding_window_log 100/1m", "token_bucket 10/1s burst 20", "fixed_window 100/1h",
		"sliding_window_counter 1000/24h", "sliding_window_counter 1000/2d", "unlimited",
		"all(token_bucket 10/1s burst 20, sliding_window_counter 1000/24h)",
		"penalize(all(token_bucket 10/1s, fixed_window 5/1m), after 3 within 1m ban 10s max 1h)",
		"token_bucket 3/7.5s burst 1", "fixed_window 1/1h30m0.5s", "all(all(fixed_window 1/1s))",
		"penalize(penalize(fixed_window 1/1s, after 1 within 1s ban 1s max 1s), after 1 within 1s ban 1s max 1s)",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := algorithm.Parse(in)
		if err != nil {
			if !errors.Is(err, algorithm.ErrInvalidStrategy) {
				t.Fatalf("Parse(%q): %v does not wrap ErrInvalidStrategy", in, err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("Parse(%q) returned an invalid strategy: %v", in, err)
		}
		roundTrips(t, s)
	})
}

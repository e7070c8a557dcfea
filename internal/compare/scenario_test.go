package compare

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPlans(t *testing.T) {
	c := Config{Server: &Server{}, Limit: 100, Window: time.Minute}
	c.setDefaults()
	ps, err := c.plans()
	if err != nil {
		t.Fatal(err)
	}
	w := time.Minute.Microseconds()
	names := map[string]int{}
	for _, p := range ps {
		names[p.name]++
		if !slices.IsSortedFunc(p.traffic, func(a, b Event) int { return compareInt(a.At, b.At) }) {
			t.Errorf("%s: traffic not in time order", p.name)
		}
		var sent int64
		for _, ev := range p.traffic {
			sent += ev.N
		}
		switch p.name {
		case "boundary burst":
			// limit in [-w/60, 0), limit in [0, w/60).
			before := slices.IndexFunc(p.traffic, func(e Event) bool { return e.At >= 0 })
			if sent != 200 || before != 100 || p.traffic[0].At < -w/60 || p.traffic[199].At >= w/60 {
				t.Errorf("boundary: %d sent, %d before the edge, from %d to %d", sent, before, p.traffic[0].At, p.traffic[199].At)
			}
		case "overload 1.5x":
			// 2 users x 150 per window x 4 windows.
			if sent != 1200 {
				t.Errorf("overload 1.5x: %d sent, want 1200", sent)
			}
		case "overload 3x":
			if sent != 2400 {
				t.Errorf("overload 3x: %d sent, want 2400", sent)
			}
		case "fleet":
			// 1.25 x K x limit per window, 3 windows.
			if want := int64(125 * p.instances * 3); sent != want {
				t.Errorf("fleet x%d: %d sent, want %d", p.instances, sent, want)
			}
		case manyUsersName:
			if len(p.traffic) != p.users || p.traffic[0].N != p.limit || !p.parallel || !slices.Equal(p.stores, []string{StoreRedis}) {
				t.Errorf("many users at %d: %d requests for %d users, cost %d", p.limit, len(p.traffic), p.users, p.traffic[0].N)
			}
			if want := map[int64]int{100: 10_000, 1000: 1000}[p.limit]; p.users != want {
				t.Errorf("many users at %d: %d users, want %d", p.limit, p.users, want)
			}
		}
	}
	want := map[string]int{"boundary burst": 1, "overload 1.5x": 1, "overload 3x": 1, "fleet": 3, manyUsersName: 2}
	for n, k := range want {
		if names[n] != k {
			t.Errorf("%d plans named %q, want %d", names[n], n, k)
		}
	}
}

func TestUsersAtHigherLimits(t *testing.T) {
	for _, c := range []struct {
		users int
		limit int64
		want  int
	}{
		{10_000, 100, 10_000}, // the configured limit: every user
		{10_000, 1000, 1000},  // users x limit / limit
		{1_000_000, 1000, 1000},
		{20, 1000, 20},     // at least min(users, 100)
		{500, 10_000, 100}, // 5, raised to 100
	} {
		cfg := Config{Users: c.users, Limit: 100}
		if got := cfg.usersAt(c.limit); got != c.want {
			t.Errorf("%d users at %d: %d, want %d", c.users, c.limit, got, c.want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no server", Config{}, "no server"},
		{"limit", Config{Server: &Server{}, Limit: -1}, "limit -1"},
		{"window", Config{Server: &Server{}, Window: 10 * time.Millisecond}, "window 10ms"},
		{"scenario", Config{Server: &Server{}, Scenarios: []string{"nope"}}, `unknown scenario "nope"`},
		{"users", Config{Server: &Server{}, Users: MaxUsers + 1}, "users 1000001"},
		{"fleet", Config{Server: &Server{}, Instances: []int{0}}, "fleet of 0"},
		{"units", Config{Server: &Server{}, Users: MaxUsers, Limit: MaxLimit}, "would hold"},
		{"decisions", Config{Server: &Server{}, Scenarios: []string{Fleet}, Limit: MaxLimit, Instances: []int{MaxInstances}, FleetWindows: 1000}, "more than"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.setDefaults()
			err := cfg.validate()
			if err == nil {
				_, err = cfg.plans()
			}
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want ErrConfig saying %q", err, c.want)
			}
		})
	}
}

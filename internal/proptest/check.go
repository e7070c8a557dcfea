package proptest

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/prop"
)

const (
	// SeedEnv replays a run: every property of the run starts from this
	// seed, which a failure prints.
	SeedEnv = "FLEETLIMIT_PROP_SEED"
	// ScaleEnv multiplies every property's number of cases (default 1), for
	// longer runs: FLEETLIMIT_PROP_SCALE=10.
	ScaleEnv = "FLEETLIMIT_PROP_SCALE"
	// maxArrivals bounds the arrivals of one generated timeline; each
	// arrival is a burst of 1 to 4 requests.
	maxArrivals = 40
)

// env reads the seed and scale once per run.
var env = sync.OnceValue(func() (e struct {
	seed  int64
	scale float64
	err   error
}) {
	e.seed, e.scale = time.Now().UnixNano(), 1
	if s := os.Getenv(SeedEnv); s != "" {
		seed, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			e.err = fmt.Errorf("%s=%q: %w", SeedEnv, s, err)
		}
		e.seed = seed
	}
	if s := os.Getenv(ScaleEnv); s != "" {
		scale, err := strconv.ParseFloat(s, 64)
		if err != nil || scale <= 0 {
			e.err = fmt.Errorf("%s=%q: want a number > 0", ScaleEnv, s)
		}
		e.scale = scale
	}
	return e
})

// Params returns gopter parameters for cases successful cases (scaled by
// FLEETLIMIT_PROP_SCALE), seeded with the run's seed.
func Params(t testing.TB, cases int) *gopter.TestParameters {
	t.Helper()
	env := env()
	if env.err != nil {
		t.Fatal(env.err)
	}
	p := gopter.DefaultTestParametersWithSeed(env.seed)
	p.MinSuccessfulTests = max(1, int(float64(cases)*env.scale))
	p.MinSize = 1
	p.MaxSize = maxArrivals
	p.MaxShrinkCount = 200
	return p
}

// Check runs prop for cases cases and fails t with gopter's report, the
// seed, and the command that replays the failure.
func Check(t *testing.T, cases int, prop gopter.Prop) {
	t.Helper()
	params := Params(t, cases)
	res := prop.Check(params)
	if res.Passed() {
		return
	}
	var out strings.Builder
	gopter.NewFormatedReporter(true, 1<<20, &out).ReportTestResult(t.Name(), res)
	t.Errorf("%s\nseed %d; replay with:\n\t%s=%d ./test.sh -run '%s' %s",
		out.String(), params.Seed(), SeedEnv, params.Seed(), runPattern(t.Name()), packageDir())
}

// runPattern is the -run pattern that selects exactly the test named name.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// packageDir is the running test's package as ./test.sh takes it, relative
// to the module root: go test runs a test in its package's directory. It is
// "." when the directory cannot be placed.
func packageDir() string {
	dir, err := os.Getwd()
	if err != nil {
		return "."
	}
	for root := dir; ; {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			rel, err := filepath.Rel(root, dir)
			if err != nil || rel == "." {
				return "."
			}
			return "./" + filepath.ToSlash(rel) + "/"
		}
		parent := filepath.Dir(root)
		if parent == root {
			return "."
		}
		root = parent
	}
}

// ScenarioProp is the property that check finds nothing wrong (returns "")
// in the outcomes of every sorted scenario of newStrat run on b.
func ScenarioProp(b Backend, newStrat func(Backend, *rand.Rand) StratCase, check func(Scenario, []Outcome) string) gopter.Prop {
	g := ScenarioGen(b, func(r *rand.Rand) StratCase { return newStrat(b, r) }, false)
	return prop.ForAll(func(s Scenario) (string, error) {
		outs, err := RunScenario(b.Store, s)
		if err != nil {
			return "", err
		}
		return check(s, outs), nil
	}, g)
}

// CheckOnBackends checks ScenarioProp on every backend, one subtest each.
func CheckOnBackends(t *testing.T, bs []Backend, newStrat func(Backend, *rand.Rand) StratCase, check func(Scenario, []Outcome) string) {
	t.Helper()
	for _, b := range bs {
		t.Run(b.Name, func(t *testing.T) {
			Check(t, b.Cases, ScenarioProp(b, newStrat, check))
		})
	}
}

// CheckEntries checks, for every algorithm in the registry and every
// backend (one subtest each, named after them), that check finds nothing
// wrong (returns "") in generated sorted scenarios of the registry's
// strategies (EntryCase) on that backend.
func CheckEntries(t *testing.T, bs []Backend, check func(Backend, Scenario) (string, error)) {
	t.Helper()
	checkEntries(t, bs, false, check)
}

// CheckRefundEntries is CheckEntries over scenarios with refunds
// (WithRefunds).
func CheckRefundEntries(t *testing.T, bs []Backend, check func(Backend, Scenario) (string, error)) {
	t.Helper()
	checkEntries(t, bs, true, check)
}

func checkEntries(t *testing.T, bs []Backend, refunds bool, check func(Backend, Scenario) (string, error)) {
	t.Helper()
	for _, e := range RegistryEntries(t) {
		t.Run(e.Name, func(t *testing.T) {
			for _, b := range bs {
				t.Run(b.Name, func(t *testing.T) {
					g := ScenarioGen(b, func(r *rand.Rand) StratCase { return EntryCase(e, b, r) }, false)
					if refunds {
						g = WithRefunds(g)
					}
					Check(t, b.Cases, prop.ForAll(func(s Scenario) (string, error) { return check(b, s) }, g))
				})
			}
		})
	}
}

package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// Config is a loaded configuration: envoyproxy/ratelimit's YAML, one domain
// per file, with fleetlimit's additions per rate_limit (see docs/service.md).
// It is immutable once loaded, and safe for concurrent use.
type Config struct {
	domains map[string]*node
	rules   []*rule // every rule with a limit, in file order
}

// node is one level of a domain's descriptor tree: the children matched by
// "key_value" or by "key" alone, the children whose value is a wildcard
// pattern (in configuration order), and the rule of this level, if any.
type node struct {
	children  map[string]*node
	wildcards []*wildcard
	rule      *rule
	// pattern is this node's value pattern when it was declared with a
	// wildcard and share_threshold: every value it matches shares one
	// counter.
	shared string
}

// wildcard is a child whose value contains '*': key is matched exactly, the
// value by parts (the pattern split on '*'; each '*' matches any run of
// characters, possibly empty).
type wildcard struct {
	key   string
	parts []string
	node  *node
}

// Algorithm names accepted by rate_limit.algorithm.
const (
	algoFixedWindow    = "fixed_window"
	algoSlidingLog     = "sliding_window_log"
	algoTokenBucket    = "token_bucket"
	algoSlidingCounter = "sliding_window_counter"
)

// rule is one rate_limit of the configuration.
type rule struct {
	domain string
	// path is envoyproxy/ratelimit's key of the rule below its domain,
	// e.g. "key1_value1.subkey1": configuration text, never a request's
	// value, so it is safe as a metric label.
	path string
	file string
	line int

	unlimited      bool
	name           string
	replaces       []string
	shadow         bool
	detailedMetric bool

	// The limit; a request must also pass each of also's (algorithm.All).
	limitSpec
	also []limitSpec

	// Options of the rule's limiter; zero values leave fleetlimitd's
	// defaults.
	failurePolicy string        // "", local, open or closed
	denialCache   int           // fleetlimit.WithDenialCache's maxKeys; 0: none
	leaseSize     int64         // fleetlimit.WithLeases' size; 0: none
	leaseMaxAge   time.Duration // and its maxAge
}

// limitSpec is one limit: requests_per_unit per unit_multiplier units, by
// an algorithm.
type limitSpec struct {
	requestsPerUnit uint32
	unit            rlspb.RateLimitResponse_RateLimit_Unit
	multiplier      uint32 // 0: not given (1)
	algorithm       string
	burst           int64 // token_bucket only; 0: requests_per_unit
}

// window is the limit's period: its unit times unit_multiplier.
func (l limitSpec) window() time.Duration {
	return unitDuration(l.unit) * time.Duration(max(1, l.multiplier))
}

// strategy is the limit's algorithm over its limit and window; nil for
// requests_per_unit 0, which denies everything.
func (l limitSpec) strategy() algorithm.Strategy {
	if l.requestsPerUnit == 0 {
		return nil
	}
	return newStrategy(l.algorithm, int64(l.requestsPerUnit), l.window(), l.burst)
}

// strategy is the rule's: its limit's, or with also, algorithm.All of its
// limit and also's.
func (r *rule) strategy() algorithm.Strategy {
	s := r.limitSpec.strategy()
	if s == nil || len(r.also) == 0 {
		return s
	}
	members := []algorithm.Strategy{s}
	for _, a := range r.also {
		members = append(members, a.strategy())
	}
	return algorithm.All(members...)
}

// newStrategy builds the strategy of an algorithm name (default
// fixed_window, aligned to multiples of window since the Unix epoch, as
// envoyproxy/ratelimit's counters are).
func newStrategy(name string, limit int64, window time.Duration, burst int64) algorithm.Strategy {
	switch name {
	case algoSlidingLog:
		return algorithm.SlidingWindowLog(limit, window)
	case algoTokenBucket:
		if burst == 0 {
			burst = limit
		}
		return algorithm.TokenBucket(limit, window, burst)
	case algoSlidingCounter:
		return algorithm.SlidingWindowCounter(limit, window)
	default:
		return algorithm.FixedWindow(limit, window)
	}
}

// unitDuration is the length of an envoyproxy/ratelimit unit: a month is
// 30 days and a year 365, as there.
func unitDuration(u rlspb.RateLimitResponse_RateLimit_Unit) time.Duration {
	const day = 24 * time.Hour
	switch u {
	case rlspb.RateLimitResponse_RateLimit_SECOND:
		return time.Second
	case rlspb.RateLimitResponse_RateLimit_MINUTE:
		return time.Minute
	case rlspb.RateLimitResponse_RateLimit_HOUR:
		return time.Hour
	case rlspb.RateLimitResponse_RateLimit_DAY:
		return day
	case rlspb.RateLimitResponse_RateLimit_WEEK:
		return 7 * day
	case rlspb.RateLimitResponse_RateLimit_MONTH:
		return 30 * day
	case rlspb.RateLimitResponse_RateLimit_YEAR:
		return 365 * day
	}
	return 0
}

// parseUnit reads a unit name, in any case, as envoyproxy/ratelimit does;
// ok is false for an unknown name (and for "unknown").
func parseUnit(s string) (rlspb.RateLimitResponse_RateLimit_Unit, bool) {
	v, ok := rlspb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(s)]
	u := rlspb.RateLimitResponse_RateLimit_Unit(v)
	return u, ok && unitDuration(u) > 0
}

// ConfigError is one reason a configuration was refused, with where.
type ConfigError struct {
	File   string
	Line   int // 0 when the file as a whole is at fault
	Reason string
}

func (e *ConfigError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Reason)
}

// errNoConfig is returned for a configuration path with no YAML file.
var errNoConfig = errors.New("no configuration file")

// configFiles lists the files a configuration path names: the path itself
// when it is a file, or each *.yaml and *.yml file directly in it, sorted,
// when it is a directory (as envoyproxy/ratelimit loads its config
// directory).
func configFiles(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
			files = append(files, filepath.Join(path, e.Name()))
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w in directory %s", errNoConfig, path)
	}
	return files, nil
}

// parseConfig loads files (name and content, one domain each). It returns
// every error found, each a *ConfigError, joined.
func parseConfig(files map[string][]byte) (*Config, error) {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	c := &Config{domains: map[string]*node{}}
	domainFile := map[string]string{}
	var errs []error
	for _, name := range names {
		p := &parser{file: name}
		domain, root := p.file1(files[name])
		if domain != "" {
			if other, dup := domainFile[domain]; dup {
				p.errorf(0, "duplicate domain '%s' in config file (also in %s)", domain, other)
			} else {
				domainFile[domain] = name
				c.domains[domain] = root
			}
		}
		errs = append(errs, p.errs...)
		c.rules = append(c.rules, p.rules...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// parser reads one file, collecting its errors and rules.
type parser struct {
	file  string
	errs  []error
	rules []*rule
}

func (p *parser) errorf(line int, format string, args ...any) {
	p.errs = append(p.errs, &ConfigError{File: p.file, Line: line, Reason: fmt.Sprintf(format, args...)})
}

// Keys each mapping may hold. envoyproxy/ratelimit's keys that change
// nothing fleetlimitd decides (detailed_metric, value_to_metric, metadata)
// are accepted; quota_mode is refused, as fleetlimitd does not implement it.
var (
	rootKeys       = []string{"domain", "descriptors"}
	descriptorKeys = []string{"key", "value", "descriptors", "rate_limit", "shadow_mode", "detailed_metric", "value_to_metric", "share_threshold", "metadata", "quota_mode"}
	rateLimitKeys  = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "burst", "unit_multiplier", "failure_policy", "denial_cache", "leases", "also"}
	replacesKeys   = []string{"name"}
	leasesKeys     = []string{"size", "max_age"}
	alsoKeys       = []string{"unit", "requests_per_unit", "unit_multiplier", "algorithm", "burst"}
)

// fields checks that n is a mapping whose keys are all strings among
// allowed, each once, and returns its values by key (nil when n is not a
// mapping).
func (p *parser) fields(n *yaml.Node, what string, allowed []string) map[string]*yaml.Node {
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, "%s must be a mapping, not %s", what, kindName(n))
		return nil
	}
	m := map[string]*yaml.Node{}
	merged := map[string]*yaml.Node{} // from merge keys ("<<: *defaults")
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			sources := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				sources = v.Content
			}
			for _, src := range sources {
				for key, val := range p.fields(src, what, allowed) {
					if _, set := merged[key]; !set {
						merged[key] = val
					}
				}
			}
			continue
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			p.errorf(k.Line, "config error, key is not of type string: %v", k.Value)
			continue
		}
		if !slices.Contains(allowed, k.Value) {
			p.errorf(k.Line, "config error, unknown key '%s' in %s", k.Value, what)
			continue
		}
		if _, dup := m[k.Value]; dup {
			p.errorf(k.Line, "config error, key '%s' appears twice in %s", k.Value, what)
			continue
		}
		m[k.Value] = v
	}
	for key, val := range merged {
		if _, set := m[key]; !set {
			m[key] = val
		}
	}
	return m
}

// maxNodes bounds the nodes a file holds once its aliases are expanded, so
// that aliases of aliases cannot make a small file an enormous
// configuration.
const maxNodes = 1_000_000

// resolveAliases replaces each alias in n's tree by the node it names, as
// yaml.v2 (which envoyproxy/ratelimit reads with) resolves them, and returns
// how many nodes the tree holds expanded (counting up to past maxNodes);
// size memoizes it per node.
func resolveAliases(n *yaml.Node, size map[*yaml.Node]int) int {
	if s, done := size[n]; done {
		return s
	}
	size[n] = 1 // an alias cycle counts once
	total := 1
	for i, c := range n.Content {
		if c.Kind == yaml.AliasNode && c.Alias != nil {
			n.Content[i] = c.Alias
			c = c.Alias
		}
		if total += resolveAliases(c, size); total > maxNodes {
			break
		}
	}
	size[n] = total
	return total
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		return fmt.Sprintf("the %s %q", strings.TrimPrefix(n.ShortTag(), "!!"), n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

// str reads a scalar as text; null is "".
func (p *parser) str(n *yaml.Node, what string) string {
	if n == nil || n.ShortTag() == "!!null" {
		return ""
	}
	if n.Kind != yaml.ScalarNode {
		p.errorf(n.Line, "%s must be a string, not %s", what, kindName(n))
		return ""
	}
	return n.Value
}

func (p *parser) boolean(n *yaml.Node, what string) bool {
	if n == nil {
		return false
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
		p.errorf(n.Line, "%s must be true or false, not %s", what, kindName(n))
	}
	return b
}

// integer reads a non-negative integer up to hi.
func (p *parser) integer(n *yaml.Node, what string, hi uint64) uint64 {
	if n == nil {
		return 0
	}
	v, err := strconv.ParseUint(n.Value, 10, 64)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || err != nil || v > hi {
		p.errorf(n.Line, "%s must be an integer from 0 to %d, not %s", what, hi, kindName(n))
		return 0
	}
	return v
}

func (p *parser) list(n *yaml.Node, what string) []*yaml.Node {
	if n == nil || n.ShortTag() == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n.Line, "%s must be a list, not %s", what, kindName(n))
		return nil
	}
	return n.Content
}

// file1 parses one file: its domain and descriptor tree.
func (p *parser) file1(content []byte) (string, *node) {
	var doc yaml.Node
	if err := yaml.Unmarshal(content, &doc); err != nil {
		p.errorf(0, "error loading config file: %v", err)
		return "", nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		p.errorf(0, "config file cannot have empty domain")
		return "", nil
	}
	if resolveAliases(&doc, map[*yaml.Node]int{}) > maxNodes {
		p.errorf(0, "more than %d nodes once its aliases are expanded", maxNodes)
		return "", nil
	}
	root := p.fields(doc.Content[0], "the file", rootKeys)
	if root == nil {
		return "", nil
	}
	domain := p.str(root["domain"], "domain")
	if domain == "" {
		p.errorf(doc.Content[0].Line, "config file cannot have empty domain")
		return "", nil
	}
	tree := p.descriptors(domain, "", root["descriptors"])
	return domain, tree
}

// descriptors parses a list of descriptors below parent (the path so far,
// "" at the domain's level) into a node.
func (p *parser) descriptors(domain, parent string, list *yaml.Node) *node {
	level := &node{children: map[string]*node{}}
	for _, d := range p.list(list, "descriptors") {
		f := p.fields(d, "a descriptor", descriptorKeys)
		if f == nil {
			continue
		}
		key := p.str(f["key"], "key")
		if key == "" {
			p.errorf(d.Line, "descriptor has empty key")
			continue
		}
		value := p.str(f["value"], "value")
		final := key
		if value != "" {
			final += "_" + value
		}
		path := final
		if parent != "" {
			path = parent + "." + final
		}
		if _, dup := level.children[final]; dup {
			p.errorf(d.Line, "duplicate descriptor composite key '%s.%s'", domain, path)
			continue
		}
		if f["quota_mode"] != nil && p.boolean(f["quota_mode"], "quota_mode") {
			p.errorf(f["quota_mode"].Line, "quota_mode is not supported by fleetlimitd")
		}
		p.boolean(f["value_to_metric"], "value_to_metric")
		shareThreshold := p.boolean(f["share_threshold"], "share_threshold")
		if shareThreshold && !strings.Contains(value, "*") {
			p.errorf(f["share_threshold"].Line, "share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", final)
		}
		child := p.descriptors(domain, path, f["descriptors"])
		if shareThreshold {
			child.shared = value
		}
		if rl := f["rate_limit"]; rl != nil {
			child.rule = p.rateLimit(domain, path, rl, f)
		}
		level.children[final] = child
		if strings.Contains(value, "*") {
			level.wildcards = append(level.wildcards, &wildcard{key: key, parts: strings.Split(value, "*"), node: child})
		}
	}
	return level
}

// rateLimit parses a descriptor's rate_limit (n) with its descriptor's
// fields d.
func (p *parser) rateLimit(domain, path string, n *yaml.Node, d map[string]*yaml.Node) *rule {
	f := p.fields(n, "rate_limit", rateLimitKeys)
	if f == nil {
		return nil
	}
	r := &rule{
		domain:         domain,
		path:           path,
		file:           p.file,
		line:           n.Line,
		unlimited:      p.boolean(f["unlimited"], "unlimited"),
		name:           p.str(f["name"], "name"),
		shadow:         p.boolean(d["shadow_mode"], "shadow_mode"),
		detailedMetric: p.boolean(d["detailed_metric"], "detailed_metric"),
	}
	for _, e := range p.list(f["replaces"], "replaces") {
		rf := p.fields(e, "a replaces entry", replacesKeys)
		if rf == nil {
			continue
		}
		name := p.str(rf["name"], "name")
		switch {
		case name == "":
			p.errorf(e.Line, "should not have an empty replaces entry")
		case name == r.name:
			p.errorf(e.Line, "replaces should not contain name of same descriptor")
		default:
			r.replaces = append(r.replaces, name)
		}
	}
	if r.unlimited {
		if u := f["unit"]; u != nil {
			if _, valid := parseUnit(p.str(u, "unit")); valid {
				p.errorf(u.Line, "should not specify rate limit unit when unlimited")
			}
		}
		for _, k := range []string{"algorithm", "burst", "unit_multiplier", "failure_policy", "denial_cache", "leases", "also"} {
			if f[k] != nil {
				p.errorf(f[k].Line, "should not specify %s when unlimited", k)
			}
		}
		p.rules = append(p.rules, r)
		return r
	}

	// fleetlimit's additions.
	var ok bool
	r.limitSpec, ok = p.limitSpec(n, f)
	for _, e := range p.list(f["also"], "also") {
		ef := p.fields(e, "an also entry", alsoKeys)
		if ef == nil {
			ok = false
			continue
		}
		spec, specOK := p.limitSpec(e, ef)
		if specOK && spec.requestsPerUnit == 0 {
			p.errorf(e.Line, "requests_per_unit must be at least 1 in an also entry")
			specOK = false
		}
		ok = ok && specOK
		r.also = append(r.also, spec)
	}
	if len(r.also) > 0 && r.requestsPerUnit == 0 {
		p.errorf(n.Line, "requests_per_unit 0 denies everything: it takes no also")
		ok = false
	}
	if fp := f["failure_policy"]; fp != nil {
		r.failurePolicy = p.str(fp, "failure_policy")
		if _, err := parsePolicy(r.failurePolicy); err != nil {
			p.errorf(fp.Line, "failure_policy '%s': want local, open or closed", r.failurePolicy)
		}
	}
	if dc := f["denial_cache"]; dc != nil {
		r.denialCache = int(p.integer(dc, "denial_cache", 1<<24))
		if r.denialCache == 0 {
			p.errorf(dc.Line, "denial_cache must be at least 1 (leave it out for none)")
		}
	}
	if l := f["leases"]; l != nil {
		if lf := p.fields(l, "leases", leasesKeys); lf != nil {
			r.leaseSize = int64(p.integer(lf["size"], "leases.size", algorithm.MaxInt))
			if r.leaseSize == 0 {
				p.errorf(l.Line, "leases.size must be at least 1")
			}
			r.leaseMaxAge = time.Second
			if ma := lf["max_age"]; ma != nil {
				d, err := time.ParseDuration(p.str(ma, "leases.max_age"))
				if err != nil || d < algorithm.MinWindow {
					p.errorf(ma.Line, "leases.max_age must be a duration of at least %v, such as 250ms", algorithm.MinWindow)
				}
				r.leaseMaxAge = d
			}
		}
	}
	if s := r.strategy(); ok && s != nil && len(r.also) > 0 {
		if err := s.Validate(); err != nil {
			p.errorf(n.Line, "the limits of rate_limit and also together: %v", err)
		}
	}
	p.rules = append(p.rules, r)
	return r
}

// limitSpec parses the limit of a rate_limit, or of one of its also
// entries: n with its fields f. ok is false when it has an error (reported).
func (p *parser) limitSpec(n *yaml.Node, f map[string]*yaml.Node) (spec limitSpec, ok bool) {
	errs := len(p.errs)
	unitName := p.str(f["unit"], "unit")
	unit, validUnit := parseUnit(unitName)
	if !validUnit {
		line := n.Line
		if f["unit"] != nil {
			line = f["unit"].Line
		}
		p.errorf(line, "invalid rate limit unit '%s'", unitName)
	}
	spec.unit = unit
	spec.requestsPerUnit = uint32(p.integer(f["requests_per_unit"], "requests_per_unit", math.MaxUint32))
	spec.algorithm = p.str(f["algorithm"], "algorithm")
	switch spec.algorithm {
	case "":
		spec.algorithm = algoFixedWindow
	case algoFixedWindow, algoSlidingLog, algoTokenBucket, algoSlidingCounter:
	default:
		p.errorf(f["algorithm"].Line, "unknown algorithm '%s' (want %s, %s, %s or %s)", spec.algorithm, algoFixedWindow, algoSlidingLog, algoTokenBucket, algoSlidingCounter)
	}
	if b := f["burst"]; b != nil {
		spec.burst = int64(p.integer(b, "burst", algorithm.MaxInt))
		if spec.algorithm != algoTokenBucket {
			p.errorf(b.Line, "burst applies only to algorithm token_bucket, not %s", spec.algorithm)
		} else if spec.burst == 0 {
			p.errorf(b.Line, "burst must be at least 1")
		}
	}
	if m := f["unit_multiplier"]; m != nil {
		spec.multiplier = uint32(p.integer(m, "unit_multiplier", math.MaxUint32))
		if spec.multiplier == 0 {
			p.errorf(m.Line, "unit_multiplier must be at least 1")
		}
	}
	if len(p.errs) > errs {
		return spec, false
	}
	if spec.multiplier > 0 && spec.window()/time.Duration(spec.multiplier) != unitDuration(unit) {
		p.errorf(f["unit_multiplier"].Line, "unit_multiplier %d makes the window overflow", spec.multiplier)
		return spec, false
	}
	if s := spec.strategy(); s != nil {
		if err := s.Validate(); err != nil {
			p.errorf(n.Line, "%s of %d per %v: %v", spec.algorithm, spec.requestsPerUnit, spec.window(), err)
			return spec, false
		}
	}
	return spec, true
}

// match is the rule for one request descriptor, found as envoyproxy/ratelimit
// finds it: at each level the child "key_value", else the first wildcard
// child whose pattern matches the value, else the child "key"; the rule
// applies only when found at the descriptor's last entry. shared lists, per entry, the wildcard pattern
// that stands for the value in the counter's key (share_threshold), or "".
func (c *Config) match(domain string, keys, values []string) (r *rule, shared []string) {
	level := c.domains[domain]
	if level == nil {
		return nil, nil
	}
	for i := range keys {
		next := level.children[keys[i]+"_"+values[i]]
		if next == nil {
			for _, w := range level.wildcards {
				if w.key == keys[i] && wildcardMatch(w.parts, values[i]) {
					next = w.node
					break
				}
			}
		}
		if next == nil {
			next = level.children[keys[i]]
		}
		if next == nil {
			return nil, nil
		}
		if next.shared != "" {
			if shared == nil {
				shared = make([]string, len(keys))
			}
			shared[i] = next.shared
		}
		if i == len(keys)-1 {
			return next.rule, shared
		}
		level = next
	}
	return nil, nil
}

// wildcardMatch reports whether value matches the pattern split on '*' into
// parts (at least two): it starts with the first part, ends with the last,
// and holds the others in order between them.
func wildcardMatch(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, part := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, part)
		if i < 0 {
			return false
		}
		rest = rest[i+len(part):]
	}
	return true
}

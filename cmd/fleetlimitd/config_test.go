package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

func loadFixture(t *testing.T, name string) (*Config, error) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return parseConfig(map[string][]byte{name: b})
}

// TestMatch walks the basic fixture as envoyproxy/ratelimit's GetLimit
// does: the most specific child at each level, the limit only at the
// descriptor's last entry.
func TestMatch(t *testing.T) {
	cfg, err := loadFixture(t, "basic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type kv = [2]string
	for _, tc := range []struct {
		domain  string
		entries []kv
		path    string // "" for no rule
	}{
		{"other-domain", []kv{{"key2", "x"}}, ""},
		{"test-domain", nil, ""},
		{"test-domain", []kv{{"key1", "something"}}, ""},                                   // no key-only default for key1
		{"test-domain", []kv{{"key1", "value1"}}, ""},                                      // no limit at that level
		{"test-domain", []kv{{"key1", "value1"}, {"subkey1", "x"}}, "key1_value1.subkey1"}, // the key's default
		{"test-domain", []kv{{"key1", "value1"}, {"subkey1", "subvalue1"}}, "key1_value1.subkey1_subvalue1"},
		{"test-domain", []kv{{"key2", "anything"}}, "key2"},
		{"test-domain", []kv{{"key2", "value2"}}, "key2_value2"},
		{"test-domain", []kv{{"key2", "value3"}}, ""},                  // listed without a limit
		{"test-domain", []kv{{"key2", "value2"}, {"sub", "x"}}, ""},    // deeper than the configuration
		{"test-domain", []kv{{"wild", "foo"}}, "wild_foo*"},            // '*' matches the empty string
		{"test-domain", []kv{{"wild", "foobar"}}, "wild_foo*"},         // trailing wildcard
		{"test-domain", []kv{{"wild", "fo"}}, ""},                      // too short
		{"test-domain", []kv{{"midwild", "barxyzb"}}, "midwild_bar*b"}, // middle wildcard
		{"test-domain", []kv{{"midwild", "barxyzc"}}, ""},              // wrong suffix
		{"test-domain", []kv{{"midwild", "barb"}}, "midwild_bar*b"},    // empty middle
		{"test-domain", []kv{{"midwild", "bab"}}, ""},                  // prefix and suffix may not overlap
		{"test-domain", []kv{{"key6", "x"}}, "key6"},
	} {
		keys, values := make([]string, len(tc.entries)), make([]string, len(tc.entries))
		for i, e := range tc.entries {
			keys[i], values[i] = e[0], e[1]
		}
		r, _ := cfg.match(tc.domain, keys, values)
		got := ""
		if r != nil {
			got = r.path
		}
		if got != tc.path {
			t.Errorf("match(%s, %v) = rule %q, want %q", tc.domain, tc.entries, got, tc.path)
		}
	}

	r, _ := cfg.match("test-domain", []string{"key1", "subkey1"}, []string{"value1", "subvalue1"})
	if r.requestsPerUnit != 10 || r.unit != rlspb.RateLimitResponse_RateLimit_HOUR || r.algorithm != algoFixedWindow {
		t.Errorf("key1_value1.subkey1_subvalue1 = %d per %v by %s, want 10 per HOUR by the default fixed_window", r.requestsPerUnit, r.unit, r.algorithm)
	}
	r, _ = cfg.match("test-domain", []string{"multi"}, []string{"x"})
	if r.window() != 90*time.Minute {
		t.Errorf("unit minute times unit_multiplier 90 = window %v, want 90m", r.window())
	}
	r, _ = cfg.match("test-domain", []string{"bucket"}, []string{"x"})
	if s := r.strategy(); s.Name() != "token_bucket" || s.Limit() != 5 || s.Window() != 5*time.Hour {
		t.Errorf("bucket = %s limit %d per %v, want token_bucket of burst 5 refilled in 5h", s.Name(), s.Limit(), s.Window())
	}
}

// TestCounterKey: the values make the key, one-to-one, and a
// share_threshold pattern stands for every value it matches.
func TestCounterKey(t *testing.T) {
	cfg, err := loadFixture(t, "basic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, shared := cfg.match("test-domain", []string{"shared"}, []string{"files1"})
	_, shared2 := cfg.match("test-domain", []string{"shared"}, []string{"files2"})
	if a, b := counterKey([]string{"files1"}, shared), counterKey([]string{"files2"}, shared2); a != b || a != "files*" {
		t.Errorf("share_threshold keys %q and %q, want both %q", a, b, "files*")
	}
	_, notShared := cfg.match("test-domain", []string{"wild"}, []string{"foo1"})
	if a, b := counterKey([]string{"foo1"}, notShared), counterKey([]string{"foo2"}, notShared); a == b {
		t.Errorf("wildcard values foo1 and foo2 share key %q; each value counts on its own", a)
	}
	seen := map[string][]string{}
	for _, vs := range [][]string{{"a|b", "c"}, {"a", "b|c"}, {"a%7Cb", "c"}, {""}, {"%00"}, {"", ""}, {"|"}, {strings.Repeat("x", 2000)}, {strings.Repeat("x", 2001)}} {
		k := counterKey(vs, nil)
		if k == "" || len(k) > 1024 {
			t.Errorf("counterKey(%q) = %q: want 1 to 1024 bytes", vs, k)
		}
		if other, dup := seen[k]; dup {
			t.Errorf("counterKey(%q) = counterKey(%q) = %q", vs, other, k)
		}
		seen[k] = vs
	}
}

// TestConfigRefused: each bad fixture is refused with its file, line and
// reason.
func TestConfigRefused(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"bad_unit.yaml", "bad_unit.yaml:6: invalid rate limit unit 'foo'"},
		{"duplicate_key.yaml", "duplicate_key.yaml:6: duplicate descriptor composite key 'test-domain.key1_value1'"},
		{"replaces_self.yaml", "replaces_self.yaml:7: replaces should not contain name of same descriptor"},
		{"replaces_empty.yaml", "replaces_empty.yaml:7: should not have an empty replaces entry"},
		{"unlimited_with_unit.yaml", "unlimited_with_unit.yaml:6: should not specify rate limit unit when unlimited"},
		{"misspelled_key.yaml", "misspelled_key.yaml:5: config error, unknown key 'ratelimit'"},
		{"empty_key.yaml", "empty_key.yaml:3: descriptor has empty key"},
		{"empty_domain.yaml", "empty_domain.yaml:1: config file cannot have empty domain"},
		{"non_string_key.yaml", "non_string_key.yaml:4: config error, key is not of type string: 1"},
		{"non_map_list.yaml", "non_map_list.yaml:3: a descriptor must be a mapping, not the str \"a\""},
		{"bad_yaml.yaml", "bad_yaml.yaml: error loading config file: yaml: line 2: did not find expected"},
		{"unknown_algorithm.yaml", "unknown_algorithm.yaml:7: unknown algorithm 'leaky_bucket'"},
		{"burst_not_bucket.yaml", "burst_not_bucket.yaml:7: burst applies only to algorithm token_bucket, not fixed_window"},
		{"zero_multiplier.yaml", "zero_multiplier.yaml:7: unit_multiplier must be at least 1"},
		{"negative_limit.yaml", "negative_limit.yaml:6: requests_per_unit must be an integer from 0 to 4294967295, not the int \"-1\""},
		{"share_threshold_no_wildcard.yaml", "share_threshold_no_wildcard.yaml:5: share_threshold can only be used with wildcard values"},
		{"quota_mode.yaml", "quota_mode.yaml:4: quota_mode is not supported by fleetlimitd"},
		{"bad_options.yaml", "bad_options.yaml:7: failure_policy 'maybe': want local, open or closed"},
		{"bad_options.yaml", "bad_options.yaml:8: denial_cache must be at least 1"},
		{"bad_options.yaml", "bad_options.yaml:10: leases.size must be at least 1"},
		{"bad_options.yaml", "bad_options.yaml:11: leases.max_age must be a duration of at least 1ms"},
		{"bad_also.yaml", "bad_also.yaml:5: the limits of rate_limit and also together: "},
		{"bad_also.yaml", "bad_also.yaml:15: invalid rate limit unit 'fortnight'"},
		{"bad_also.yaml", "bad_also.yaml:17: config error, unknown key 'leases' in an also entry"},
		{"log_too_large.yaml", "log_too_large.yaml:5: sliding_window_log of 2000000 per 1s: "},
	} {
		cfg, err := loadFixture(t, filepath.Join("bad", tc.file))
		if err == nil {
			t.Errorf("%s: loaded %d rules, want refused", tc.file, len(cfg.rules))
			continue
		}
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%s: error %v is not a *ConfigError", tc.file, err)
		}
		if !strings.Contains(err.Error(), filepath.Join("bad", tc.want)) {
			t.Errorf("%s: error\n%v\nwant it to contain\n%s", tc.file, err, filepath.Join("bad", tc.want))
		}
	}
}

// TestDuplicateDomain: two files may not hold one domain.
func TestDuplicateDomain(t *testing.T) {
	b := []byte("domain: d\ndescriptors:\n  - key: k\n")
	_, err := parseConfig(map[string][]byte{"a.yaml": b, "b.yaml": b})
	if err == nil || !strings.Contains(err.Error(), "b.yaml: duplicate domain 'd' in config file (also in a.yaml)") {
		t.Errorf("error %v, want b.yaml's duplicate domain", err)
	}
}

// TestDocsConfig: the configurations docs/service.md shows load.
func TestDocsConfig(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "service.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for i, part := range strings.Split(string(b), "```yaml\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		switch {
		case strings.HasPrefix(block, "domain:"):
		case strings.HasPrefix(block, "  - key:"):
			block = "domain: docs\ndescriptors:\n" + block
		default:
			continue // Envoy's configuration
		}
		blocks++
		if _, err := parseConfig(map[string][]byte{fmt.Sprintf("block%d.yaml", i): []byte(block)}); err != nil {
			t.Errorf("docs/service.md's YAML block %d:\n%s\n%v", i, block, err)
		}
	}
	if blocks < 2 {
		t.Errorf("found %d configuration blocks in docs/service.md, want at least 2", blocks)
	}
}

// TestAliases: anchors, aliases and merge keys are resolved.
func TestAliases(t *testing.T) {
	cfg, err := loadFixture(t, "aliases.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]uint32{"a": 7, "b": 7, "c": 9} {
		r, _ := cfg.match("test-domain", []string{key}, []string{"x"})
		if r == nil || r.requestsPerUnit != want || r.unit != rlspb.RateLimitResponse_RateLimit_HOUR {
			t.Errorf("key %s: rule %+v, want %d per hour", key, r, want)
		}
	}
	// Aliases of aliases: ten levels of ten would be 10^10 descriptors.
	var b strings.Builder
	b.WriteString("domain: d\nl0: &l0 [{key: k}]\n")
	for i := 1; i <= 10; i++ {
		fmt.Fprintf(&b, "l%d: &l%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 10), ", "))
	}
	if _, err := parseConfig(map[string][]byte{"laughs.yaml": []byte(b.String())}); err == nil || !strings.Contains(err.Error(), "laughs.yaml: more than 1000000 nodes once its aliases are expanded") {
		t.Errorf("aliases of aliases: %v, want refused", err)
	}
}

// FuzzParseConfig: any file content is loaded or refused with
// *ConfigErrors, never a panic; a loaded configuration's rules all bind to
// limiters, and matching any descriptor against it does not panic.
func FuzzParseConfig(f *testing.F) {
	for _, dir := range []string{"testdata", filepath.Join("testdata", "bad")} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b, "key1", "value1")
		}
	}
	f.Fuzz(func(t *testing.T, content []byte, key, value string) {
		cfg, err := parseConfig(map[string][]byte{"f.yaml": content})
		if err != nil {
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var ce *ConfigError
				if !errors.As(e, &ce) || ce.File != "f.yaml" {
					t.Fatalf("error %v is not a *ConfigError of f.yaml", e)
				}
			}
			return
		}
		for domain := range cfg.domains {
			cfg.match(domain, []string{key}, []string{value})
			cfg.match(domain, []string{key, key}, []string{value, value})
		}
		for _, r := range cfg.rules {
			if s := r.strategy(); s != nil {
				if err := s.Validate(); err != nil {
					t.Fatalf("rule %s loaded with an invalid strategy: %v", r.path, err)
				}
			}
		}
	})
}

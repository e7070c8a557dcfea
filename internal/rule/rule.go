// Package rule is the one home of a strategy's identity. Four circles,
// each inside the next, say when two strategies may share a key's state:
//
//   - the same value: one strategy (the same pointer, or == for a
//     comparable value);
//   - the same rule (Same, ID): they decide alike — the same script and
//     keys, limit, window and script arguments. The denial cache answers,
//     a lease serves, and New's claims accept, only within one rule;
//   - the same shape (SameShape): the same algorithm over the same window,
//     member by member, so a key's state carries over when only the limit
//     differs. Tiers (WithStrategyFor) must keep the limiter's shape;
//   - the same key space: the same key prefix and script tag
//     (store.RedisKey); Namespace names an unnamed limiter's prefix after
//     its rule, so that two unnamed limiters share a key space exactly when
//     they share a rule.
//
// The package imports no store: it reads only a strategy's own methods.
package rule

import (
	"fmt"
	"hash/fnv"
	"reflect"
	"slices"
	"strings"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// Inner returns the strategy inside a penalty box (algorithm.Penalize),
// or s itself.
func Inner(s algorithm.Strategy) algorithm.Strategy {
	if u, ok := s.(interface{ Unwrap() algorithm.Strategy }); ok {
		return u.Unwrap()
	}
	return s
}

// Same reports whether a and b decide alike: the same value, or the same
// script (SHA-1 and keys) with the same limit, window and script
// arguments. A strategy without a script is only ever itself (the same
// pointer).
func Same(a, b algorithm.Strategy) bool {
	if va, vb := reflect.ValueOf(a), reflect.ValueOf(b); va.Kind() == reflect.Pointer && vb.Kind() == reflect.Pointer &&
		va.Type() == vb.Type() && va.Pointer() == vb.Pointer() {
		return true
	}
	sa, sb := a.Script(), b.Script()
	if sa == nil || sb == nil {
		return false
	}
	return sa.SHA1 == sb.SHA1 && slices.Equal(sa.Keys, sb.Keys) && a.Limit() == b.Limit() &&
		a.Window() == b.Window() && reflect.DeepEqual(a.ScriptArgs(), b.ScriptArgs())
}

// ID names s's rule as a string, for maps: strategies with scripts that
// are Same have equal IDs. It is built with fmt, so it is for set-up, not
// for a decision's path.
func ID(s algorithm.Strategy) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d/%v", s.Name(), s.Limit(), s.Window())
	if sc := s.Script(); sc != nil {
		fmt.Fprintf(&b, " script %s %q", sc.SHA1, sc.Keys)
	}
	for _, a := range s.ScriptArgs() {
		fmt.Fprintf(&b, " %T(%v)", a, a)
	}
	return b.String()
}

// Describe names s for a person: its algorithm, capacity and window, and
// the exact parameters its script receives.
func Describe(s algorithm.Strategy) string {
	return fmt.Sprintf("%s, %d per %v (script arguments %v)", s.Name(), s.Limit(), s.Window(), s.ScriptArgs())
}

// SameShape returns an error unless s is own's algorithm (the same script
// tag and keys, or name without a script) over the same window, member by
// member for a composite: then a key's state under own carries over to s.
func SameShape(own, s algorithm.Strategy) error {
	if shape(own) != shape(s) || own.Window() != s.Window() || !slices.Equal(keysOf(own), keysOf(s)) {
		return fmt.Errorf("%s over %v is not the limiter's algorithm (%s over %v): a tier may change the limit only, so that a key's state carries over between tiers",
			s.Name(), s.Window(), own.Name(), own.Window())
	}
	oc, ok := own.(algorithm.Composite)
	if !ok {
		return nil
	}
	sc, ok := s.(algorithm.Composite)
	if !ok || len(sc.Members()) != len(oc.Members()) {
		return fmt.Errorf("%s is not a composite of the limiter's members", s.Name())
	}
	for i, m := range oc.Members() {
		if err := SameShape(m, sc.Members()[i]); err != nil {
			return fmt.Errorf("member %d: %w", i, err)
		}
	}
	return nil
}

// shape is what names a strategy's state: its script tag, or its name.
func shape(s algorithm.Strategy) string {
	if sc := s.Script(); sc != nil {
		return sc.Tag
	}
	return s.Name()
}

// keysOf is a strategy's key suffixes (algorithm.Script.Keys).
func keysOf(s algorithm.Strategy) []string {
	if sc := s.Script(); sc != nil {
		return sc.Keys
	}
	return nil
}

// Namespace names the key space of an unnamed limiter after its rule's
// parameters: the script's arguments joined by "." when they are short and
// plain (e.g. "100.60000000" for a sliding log of 100 per minute), else
// their FNV-1a hash. The script's tag follows the user key in every Redis
// key, so it is not repeated here.
func Namespace(s algorithm.Strategy) string {
	var b strings.Builder
	plain := true
	for i, a := range s.ScriptArgs() {
		if i > 0 {
			b.WriteByte('.')
		}
		v := fmt.Sprint(a)
		plain = plain && v != "" && strings.Trim(v, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_") == ""
		b.WriteString(v)
	}
	if plain && b.Len() > 0 && b.Len() <= 64 {
		return b.String()
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(b.String()))
	return fmt.Sprintf("h%016x", h.Sum64())
}

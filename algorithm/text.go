package algorithm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The text form of a rule, one line, as the command-line tool, overrides
// in a store and configuration files write it:
//
//	sliding_window_log 100/1m
//	token_bucket 10/1s burst 20
//	fixed_window 100/1h
//	sliding_window_counter 1000/24h
//	all(token_bucket 10/1s burst 20, sliding_window_counter 1000/24h)
//	penalize(sliding_window_log 5/1s, after 3 within 1m ban 10s max 1h)
//	unlimited
//
// A single strategy is its name, its limit (a token bucket's rate), "/"
// and its window (a token bucket's period); a token bucket may add
// "burst B" (default: its rate). A duration is Go's (time.ParseDuration:
// "1m", "1.5s", "1h30m", "250ms", "10us") or whole days ("7d"). Spaces
// between tokens are free. all(...) is All of its members, penalize(...)
// is Penalize of its strategy with the Penalty's After, Within, Ban and
// MaxBan, and unlimited is Unlimited.
//
// Parse reads it and Format writes it: for every strategy Format accepts,
// Parse(Format(s)) is the same rule as s (internal/rule's Same; proven by
// FuzzParseFormat and TestPropertyFormatParseRegistry), and Format writes
// each duration in its largest whole unit (h, m, s, ms, us).

// SyntaxError is a rule's text that Parse cannot read: Offset is the byte
// offset in Input where reading stopped. It wraps ErrInvalidStrategy.
type SyntaxError struct {
	Input  string
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("algorithm: rule %q: at offset %d: %s", e.Input, e.Offset, e.Msg)
}

// Unwrap returns ErrInvalidStrategy.
func (e *SyntaxError) Unwrap() error { return ErrInvalidStrategy }

// ErrNoTextForm is returned by Format for a strategy that has no text
// form: one not built by this package's constructors.
var ErrNoTextForm = errors.New("algorithm: strategy has no text form")

// MaxRuleLen is the longest text Parse reads, in bytes.
const MaxRuleLen = 4096

// Parse reads a rule in its text form (see the package's text form above)
// and returns its strategy. Text it cannot read is a *SyntaxError; a rule
// it reads whose parameters are invalid is the strategy's Validate error,
// wrapped. Both wrap ErrInvalidStrategy. Parse never panics, and the
// returned strategy is valid.
func Parse(text string) (Strategy, error) {
	if len(text) > MaxRuleLen {
		return nil, &SyntaxError{Input: text[:64] + "...", Offset: MaxRuleLen, Msg: fmt.Sprintf("longer than %d bytes", MaxRuleLen)}
	}
	p := &parser{in: text}
	s, err := p.rule(0)
	if err != nil {
		return nil, err
	}
	if t := p.next(); t.kind != tokEnd {
		return nil, p.errAt(t, "unexpected %s after the rule", t)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("algorithm: rule %q: %w", text, err)
	}
	return s, nil
}

// Format writes s in its text form, which Parse reads back as the same
// rule. A strategy not built by this package (see ErrNoTextForm), or an
// invalid one, is an error.
func Format(s Strategy) (string, error) {
	if s == nil || isNilPointer(s) {
		return "", fmt.Errorf("%w: nil strategy", ErrNoTextForm)
	}
	if err := s.Validate(); err != nil {
		return "", err
	}
	var b strings.Builder
	if err := format(&b, s); err != nil {
		return "", err
	}
	return b.String(), nil
}

func format(b *strings.Builder, s Strategy) error {
	switch s := s.(type) {
	case *slidingWindowLog:
		fmt.Fprintf(b, "%s %d/%s", s.Name(), s.limit, FormatDuration(s.d))
	case *fixedWindow:
		fmt.Fprintf(b, "%s %d/%s", s.Name(), s.limit, FormatDuration(s.d))
	case *slidingWindowCounter:
		fmt.Fprintf(b, "%s %d/%s", s.Name(), s.limit, FormatDuration(s.d))
	case *tokenBucket:
		fmt.Fprintf(b, "%s %d/%s burst %d", s.Name(), s.rate, FormatDuration(s.per), s.burst)
	case *unlimited:
		b.WriteString("unlimited")
	case *all:
		b.WriteString("all(")
		for i, m := range s.members {
			if i > 0 {
				b.WriteString(", ")
			}
			if err := format(b, m); err != nil {
				return err
			}
		}
		b.WriteByte(')')
	case *penalized:
		b.WriteString("penalize(")
		if err := format(b, s.inner); err != nil {
			return err
		}
		fmt.Fprintf(b, ", after %d within %s ban %s max %s)", s.p.After, FormatDuration(s.p.Within), FormatDuration(s.p.Ban), FormatDuration(s.p.MaxBan))
	default:
		return fmt.Errorf("%w: %s (%T)", ErrNoTextForm, s.Name(), s)
	}
	return nil
}

// String is the strategy's text form (Format).
func (s *slidingWindowLog) String() string { return text(s) }

// String is the strategy's text form (Format).
func (s *fixedWindow) String() string { return text(s) }

// String is the strategy's text form (Format).
func (s *slidingWindowCounter) String() string { return text(s) }

// String is the strategy's text form (Format).
func (s *tokenBucket) String() string { return text(s) }

// String is the strategy's text form (Format).
func (s *all) String() string { return text(s) }

// String is the strategy's text form (Format).
func (s *penalized) String() string { return text(s) }

// String is "unlimited".
func (s *unlimited) String() string { return "unlimited" }

// text is s's text form, or for an invalid s its name and error.
func text(s Strategy) string {
	t, err := Format(s)
	if err != nil {
		return fmt.Sprintf("%s (invalid: %v)", s.Name(), err)
	}
	return t
}

// FormatDuration writes d in its largest whole unit: 24h, 1m, 90s, 250ms,
// 10us; what it cannot write so (a fraction of a microsecond) in Go's own
// form. ParseDuration reads both back.
func FormatDuration(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}} {
		if d != 0 && d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return d.String()
}

// ParseDuration reads a duration as Go does (time.ParseDuration), or whole
// days: "7d".
func ParseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok && days != "" && strings.Trim(days, "0123456789") == "" {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n > int64(MaxWindow/(24*time.Hour)) {
			return 0, fmt.Errorf("%q is too many days", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// The parser: tokens are words (letters, digits, '_', '.', 'µ': names,
// numbers, durations) and the punctuation ( ) , /.
type tokKind uint8

const (
	tokEnd tokKind = iota
	tokWord
	tokPunct
)

type token struct {
	kind tokKind
	text string
	pos  int
}

func (t token) String() string {
	switch t.kind {
	case tokEnd:
		return "end of text"
	case tokPunct:
		return strconv.Quote(t.text)
	}
	return strconv.Quote(t.text)
}

type parser struct {
	in  string
	pos int
}

// maxDepth bounds nesting (all inside penalize inside all ...): deeper
// rules are invalid anyway, and the bound keeps a fuzzed input from
// recursing without end.
const maxDepth = 4

func (p *parser) errAt(t token, format string, args ...any) error {
	return &SyntaxError{Input: p.in, Offset: t.pos, Msg: fmt.Sprintf(format, args...)}
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c >= 0x80
}

func (p *parser) next() token {
	for p.pos < len(p.in) && (p.in[p.pos] == ' ' || p.in[p.pos] == '\t') {
		p.pos++
	}
	start := p.pos
	if p.pos >= len(p.in) {
		return token{kind: tokEnd, pos: start}
	}
	c := p.in[p.pos]
	switch {
	case strings.IndexByte("(),/", c) >= 0:
		p.pos++
		return token{kind: tokPunct, text: string(c), pos: start}
	case isWordByte(c):
		for p.pos < len(p.in) && isWordByte(p.in[p.pos]) {
			p.pos++
		}
		return token{kind: tokWord, text: p.in[start:p.pos], pos: start}
	}
	p.pos++
	return token{kind: tokPunct, text: string(c), pos: start}
}

func (p *parser) peek() token {
	save := p.pos
	t := p.next()
	p.pos = save
	return t
}

func (p *parser) expect(punct string) error {
	if t := p.next(); t.kind != tokPunct || t.text != punct {
		return p.errAt(t, "want %q, got %s", punct, t)
	}
	return nil
}

func (p *parser) keyword(word string) error {
	if t := p.next(); t.kind != tokWord || t.text != word {
		return p.errAt(t, "want %q, got %s", word, t)
	}
	return nil
}

func (p *parser) count(what string) (int64, error) {
	t := p.next()
	if t.kind != tokWord || strings.Trim(t.text, "0123456789") != "" {
		return 0, p.errAt(t, "want %s (a whole number), got %s", what, t)
	}
	v, err := strconv.ParseInt(t.text, 10, 64)
	if err != nil || v > MaxInt {
		return 0, p.errAt(t, "%s %s is above 2^53", what, t.text)
	}
	return v, nil
}

func (p *parser) duration(what string) (time.Duration, error) {
	t := p.next()
	if t.kind != tokWord {
		return 0, p.errAt(t, "want %s (a duration such as 1m or 250ms), got %s", what, t)
	}
	d, err := ParseDuration(t.text)
	if err != nil {
		return 0, p.errAt(t, "want %s (a duration such as 1m or 250ms): %v", what, err)
	}
	return d, nil
}

// rate reads "limit/window".
func (p *parser) rate() (int64, time.Duration, error) {
	n, err := p.count("a limit")
	if err != nil {
		return 0, 0, err
	}
	if err := p.expect("/"); err != nil {
		return 0, 0, err
	}
	d, err := p.duration("a window")
	return n, d, err
}

// singles are the single strategies by name, each read after its name.
var singles = map[string]func(p *parser) (Strategy, error){
	"sliding_window_log":     windowed(SlidingWindowLog),
	"fixed_window":           windowed(FixedWindow),
	"sliding_window_counter": windowed(SlidingWindowCounter),
	"token_bucket": func(p *parser) (Strategy, error) {
		rate, per, err := p.rate()
		if err != nil {
			return nil, err
		}
		burst := rate
		if t := p.peek(); t.kind == tokWord && t.text == "burst" {
			p.next()
			if burst, err = p.count("a burst"); err != nil {
				return nil, err
			}
		}
		return TokenBucket(rate, per, burst), nil
	},
	"unlimited": func(*parser) (Strategy, error) { return Unlimited(), nil },
}

func windowed(c Constructor) func(p *parser) (Strategy, error) {
	return func(p *parser) (Strategy, error) {
		n, d, err := p.rate()
		if err != nil {
			return nil, err
		}
		return c(n, d), nil
	}
}

func (p *parser) rule(depth int) (Strategy, error) {
	t := p.next()
	if t.kind != tokWord {
		return nil, p.errAt(t, "want a rule (an algorithm's name, all( or penalize( ), got %s", t)
	}
	if depth > maxDepth {
		return nil, p.errAt(t, "rules nest at most %d deep", maxDepth)
	}
	switch t.text {
	case "all":
		if err := p.expect("("); err != nil {
			return nil, err
		}
		var members []Strategy
		for {
			m, err := p.rule(depth + 1)
			if err != nil {
				return nil, err
			}
			if members = append(members, m); len(members) > MaxMembers {
				return nil, p.errAt(t, "all( takes at most %d members", MaxMembers)
			}
			c := p.next()
			if c.kind == tokPunct && c.text == ")" {
				return All(members...), nil
			}
			if c.kind != tokPunct || c.text != "," {
				return nil, p.errAt(c, "want \",\" or \")\" in all(, got %s", c)
			}
		}
	case "penalize":
		if err := p.expect("("); err != nil {
			return nil, err
		}
		inner, err := p.rule(depth + 1)
		if err != nil {
			return nil, err
		}
		if err := p.expect(","); err != nil {
			return nil, err
		}
		var pen Penalty
		if err := p.keyword("after"); err != nil {
			return nil, err
		}
		if pen.After, err = p.count("a number of denials"); err != nil {
			return nil, err
		}
		for _, f := range []struct {
			word string
			d    *time.Duration
		}{{"within", &pen.Within}, {"ban", &pen.Ban}, {"max", &pen.MaxBan}} {
			if err := p.keyword(f.word); err != nil {
				return nil, err
			}
			if *f.d, err = p.duration("a duration"); err != nil {
				return nil, err
			}
		}
		if err := p.expect(")"); err != nil {
			return nil, err
		}
		return Penalize(inner, pen), nil
	}
	read, ok := singles[t.text]
	if !ok {
		return nil, p.errAt(t, "unknown algorithm %s (want one of all, penalize, fixed_window, sliding_window_counter, sliding_window_log, token_bucket, unlimited)", t)
	}
	return read(p)
}

// Unlimited returns the strategy that admits every request and records
// nothing: an exemption. It is meant as an override
// (fleetlimit.Limiter.SetOverride), which the limiter answers in process
// without reaching the store. It has no Lua twin: the Redis store refuses
// it as a limiter's own rule, and All and Penalize refuse it as a member.
// Its Limit is MaxInt and its Window MaxWindow; every Unlimited() is the
// same value.
func Unlimited() Strategy { return theUnlimited }

// IsUnlimited reports whether s is Unlimited.
func IsUnlimited(s Strategy) bool {
	_, ok := s.(*unlimited)
	return ok
}

var theUnlimited = &unlimited{}

type unlimited struct{}

type unlimitedState struct{}

func (unlimitedState) FullAt() int64 { return 0 }
func (unlimitedState) Clone() State  { return unlimitedState{} }

func (*unlimited) Name() string          { return "unlimited" }
func (*unlimited) Limit() int64          { return MaxInt }
func (*unlimited) Window() time.Duration { return MaxWindow }
func (*unlimited) Validate() error       { return nil }
func (*unlimited) NewState() State       { return unlimitedState{} }
func (*unlimited) Script() *Script       { return nil }
func (*unlimited) ScriptArgs() []any     { return nil }

func (*unlimited) Decide(State, time.Time, int64) (Decision, error) {
	return Decision{Allowed: true, Limit: MaxInt, Remaining: MaxInt}, nil
}

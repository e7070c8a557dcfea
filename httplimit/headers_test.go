package httplimit_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A strict parser for the Structured Field Values that the draft RateLimit
// fields use (RFC 8941 / RFC 9651 section 4.2): a List of Items with
// Parameters; bare items may be Integers, Decimals, Strings, Tokens or
// Booleans. No library for it is in the module proxy lists this project
// draws on, and the grammar is small: the parser follows the RFC's parsing
// algorithm step by step and fails on anything it does not allow.

// sfToken is a Token bare item, kept apart from a String.
type sfToken string

// sfParam is one parameter, in order.
type sfParam struct {
	Key   string
	Value any // int64, float64, string, sfToken or bool
}

// sfItem is a List member that is an Item.
type sfItem struct {
	Value  any
	Params []sfParam
}

// param returns the value of the parameter named key.
func (it sfItem) param(key string) (any, bool) {
	for _, p := range it.Params {
		if p.Key == key {
			return p.Value, true
		}
	}
	return nil, false
}

type sfParser struct{ s string }

// parseSFList parses a field value as an sf-list of Items (inner lists are
// not expected here and are an error).
func parseSFList(field string) ([]sfItem, error) {
	p := &sfParser{s: strings.TrimLeft(field, " ")}
	var items []sfItem
	for p.s != "" {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		items = append(items, it)
		p.s = strings.TrimLeft(p.s, " \t")
		if p.s == "" {
			return items, nil
		}
		if p.s[0] != ',' {
			return nil, fmt.Errorf("expected ',' at %q", p.s)
		}
		p.s = strings.TrimLeft(p.s[1:], " \t")
		if p.s == "" {
			return nil, errors.New("trailing comma")
		}
	}
	return items, nil
}

func (p *sfParser) item() (sfItem, error) {
	v, err := p.bareItem()
	if err != nil {
		return sfItem{}, err
	}
	it := sfItem{Value: v}
	for strings.HasPrefix(p.s, ";") {
		p.s = strings.TrimLeft(p.s[1:], " ")
		k, err := p.key()
		if err != nil {
			return sfItem{}, err
		}
		var pv any = true
		if strings.HasPrefix(p.s, "=") {
			p.s = p.s[1:]
			if pv, err = p.bareItem(); err != nil {
				return sfItem{}, err
			}
		}
		for i := range it.Params {
			if it.Params[i].Key == k { // a repeated key overwrites
				it.Params = append(it.Params[:i], it.Params[i+1:]...)
				break
			}
		}
		it.Params = append(it.Params, sfParam{k, pv})
	}
	return it, nil
}

func (p *sfParser) key() (string, error) {
	if p.s == "" || !(isLcalpha(p.s[0]) || p.s[0] == '*') {
		return "", fmt.Errorf("bad key at %q", p.s)
	}
	i := 1
	for i < len(p.s) && (isLcalpha(p.s[i]) || isDigit(p.s[i]) || strings.IndexByte("_-.*", p.s[i]) >= 0) {
		i++
	}
	k := p.s[:i]
	p.s = p.s[i:]
	return k, nil
}

func (p *sfParser) bareItem() (any, error) {
	if p.s == "" {
		return nil, errors.New("missing bare item")
	}
	switch c := p.s[0]; {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case isAlpha(c) || c == '*':
		i := 1
		for i < len(p.s) && (isTchar(p.s[i]) || p.s[i] == ':' || p.s[i] == '/') {
			i++
		}
		t := sfToken(p.s[:i])
		p.s = p.s[i:]
		return t, nil
	case c == '?':
		if len(p.s) < 2 || (p.s[1] != '0' && p.s[1] != '1') {
			return nil, fmt.Errorf("bad boolean at %q", p.s)
		}
		b := p.s[1] == '1'
		p.s = p.s[2:]
		return b, nil
	}
	return nil, fmt.Errorf("unexpected bare item at %q", p.s)
}

func (p *sfParser) number() (any, error) {
	i := 0
	if p.s[0] == '-' {
		i++
	}
	start, dot := i, -1
	for i < len(p.s) && (isDigit(p.s[i]) || (p.s[i] == '.' && dot < 0)) {
		if p.s[i] == '.' {
			dot = i
		}
		i++
	}
	num := p.s[:i]
	p.s = p.s[i:]
	digits := num[start:]
	switch {
	case digits == "" || digits[0] == '.':
		return nil, fmt.Errorf("bad number %q", num)
	case dot < 0:
		if len(digits) > 15 {
			return nil, fmt.Errorf("integer %q has more than 15 digits", num)
		}
		return strconv.ParseInt(num, 10, 64)
	default:
		intPart, frac := dot-start, i-dot-1
		if intPart > 12 || frac < 1 || frac > 3 {
			return nil, fmt.Errorf("bad decimal %q", num)
		}
		return strconv.ParseFloat(num, 64)
	}
}

func (p *sfParser) str() (string, error) {
	var b strings.Builder
	for i := 1; i < len(p.s); i++ {
		switch c := p.s[i]; {
		case c == '\\':
			i++
			if i == len(p.s) || (p.s[i] != '"' && p.s[i] != '\\') {
				return "", fmt.Errorf("bad escape in %q", p.s)
			}
			b.WriteByte(p.s[i])
		case c == '"':
			p.s = p.s[i+1:]
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("byte %#x not allowed in a string", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("unterminated string")
}

func isDigit(c byte) bool   { return c >= '0' && c <= '9' }
func isLcalpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isAlpha(c byte) bool   { return isLcalpha(c) || (c >= 'A' && c <= 'Z') }
func isTchar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// The parser accepts the draft's own examples and rejects near misses, so
// that passing it means something.
func TestSFParser(t *testing.T) {
	items, err := parseSFList(`"burst";q=100;w=60,"daily";q=1000;w=86400`)
	require.NoError(t, err)
	require.Equal(t, []sfItem{
		{Value: "burst", Params: []sfParam{{"q", int64(100)}, {"w", int64(60)}}},
		{Value: "daily", Params: []sfParam{{"q", int64(1000)}, {"w", int64(86400)}}},
	}, items)
	items, err = parseSFList(`"a \"quoted\\ name";r=0;t=5, tok;x=?1;d=1.5`)
	require.NoError(t, err)
	require.Equal(t, `a "quoted\ name`, items[0].Value)
	require.Equal(t, sfToken("tok"), items[1].Value)
	for _, bad := range []string{
		`"name";q=100,`,             // trailing comma
		`"name";Q=100`,              // keys are lowercase
		`"name";q=1234567890123456`, // integer too long
		`"name";q=1.2345`,           // decimal with 4 fractional digits
		`"name`,                     // unterminated
		`"na\me";q=1`,               // bad escape
		`"name" "other"`,            // missing comma
		`"name";q=`,                 // missing value
		`"nämé";q=1`,                // non-ASCII in a string
		`("inner" "list")`,          // inner lists are not items
	} {
		_, err := parseSFList(bad)
		require.Error(t, err, bad)
	}
}

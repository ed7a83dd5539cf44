package probes

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This is a parser of the Prometheus text exposition format (0.0.4, with
// the UTF-8 quoted-name extension), written here because
// prometheus/common/expfmt cannot be built from this module's go.sum (it
// lacks github.com/munnerz/goautoneg and github.com/pandatix/go-abnf).
// It keeps what ParseMetrics needs: per sample name, the sum over label
// sets, with histogram/summary buckets and quantiles dropped.

// textParseError is a malformed exposition line.
type textParseError struct {
	Line int
	Msg  string
}

func (e *textParseError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// parseExposition sums the exposition's samples by name.
func parseExposition(r io.Reader) (map[string]float64, error) {
	types := map[string]string{}
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		bad := func(format string, a ...any) error {
			return &textParseError{Line: n, Msg: fmt.Sprintf(format, a...)}
		}
		if !utf8.ValidString(line) {
			return nil, bad("invalid UTF-8")
		}
		if line[0] == '#' {
			f := strings.Fields(line[1:])
			if len(f) < 2 || (f[0] != "TYPE" && f[0] != "HELP") {
				continue // a comment
			}
			name, err := unquoteName(f[1])
			if err != nil {
				return nil, bad("%s: %v", f[0], err)
			}
			if f[0] == "HELP" {
				continue
			}
			if len(f) != 3 {
				return nil, bad("TYPE %s: want one type, got %q", name, strings.Join(f[2:], " "))
			}
			switch f[2] {
			case "counter", "gauge", "histogram", "summary", "untyped", "gaugehistogram":
			default:
				return nil, bad("TYPE %s: unknown type %q", name, f[2])
			}
			if _, dup := types[name]; dup {
				return nil, bad("second TYPE line for %s", name)
			}
			types[name] = f[2]
			continue
		}
		name, labels, value, err := parseSample(line)
		if err != nil {
			return nil, bad("%v", err)
		}
		if keepSample(name, labels, types) && !math.IsNaN(value) && !math.IsInf(value, 0) {
			out[name] += value
		}
	}
	if err := sc.Err(); err != nil {
		return nil, &textParseError{Line: n + 1, Msg: err.Error()}
	}
	return out, nil
}

// keepSample drops histogram buckets, summary quantiles and _created
// timestamps.
func keepSample(name string, labels []string, types map[string]string) bool {
	if strings.HasSuffix(name, "_created") {
		return false
	}
	if base, ok := strings.CutSuffix(name, "_bucket"); ok {
		if t := types[base]; t == "histogram" || t == "gaugehistogram" {
			return false
		}
	}
	if types[name] == "summary" || types[name] == "histogram" {
		for _, l := range labels {
			if l == "quantile" || l == "le" {
				return false
			}
		}
	}
	return true
}

// unquoteName accepts a legacy metric name or a quoted UTF-8 one.
func unquoteName(s string) (string, error) {
	if strings.HasPrefix(s, `"`) {
		u, err := strconv.Unquote(s)
		if err != nil || u == "" {
			return "", fmt.Errorf("bad quoted name %s", s)
		}
		return u, nil
	}
	if !legacyName(s) {
		return "", fmt.Errorf("invalid metric name %q", s)
	}
	return s, nil
}

func legacyName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		ok := c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return false
		}
	}
	return true
}

// parseSample parses `name{l="v",...} value [timestamp]`, where the name may
// also be a quoted string inside the braces: `{"a.b",l="v"} 1`.
func parseSample(line string) (name string, labels []string, value float64, err error) {
	i := strings.IndexAny(line, "{ \t")
	if i < 0 {
		return "", nil, 0, errors.New("sample without a value")
	}
	name = line[:i]
	rest := line[i:]
	if name != "" && !legacyName(name) {
		return "", nil, 0, fmt.Errorf("invalid metric name %q", name)
	}
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, " \t")
			if rest == "" {
				return "", nil, 0, errors.New("unterminated label set")
			}
			if rest[0] == '}' {
				rest = rest[1:]
				break
			}
			var key string
			if rest[0] == '"' {
				var q string
				if q, rest, err = cutQuoted(rest); err != nil {
					return "", nil, 0, err
				}
				key = q
			} else {
				j := strings.IndexAny(rest, "= \t,}")
				if j <= 0 {
					return "", nil, 0, fmt.Errorf("bad label near %.20q", rest)
				}
				key, rest = rest[:j], rest[j:]
				if !legacyName(key) || strings.Contains(key, ":") {
					return "", nil, 0, fmt.Errorf("invalid label name %q", key)
				}
			}
			rest = strings.TrimLeft(rest, " \t")
			switch {
			case rest != "" && rest[0] == '=':
				rest = strings.TrimLeft(rest[1:], " \t")
				if rest == "" || rest[0] != '"' {
					return "", nil, 0, fmt.Errorf("label %s: value must be quoted", key)
				}
				if _, rest, err = cutQuoted(rest); err != nil {
					return "", nil, 0, fmt.Errorf("label %s: %w", key, err)
				}
				labels = append(labels, key)
			case name == "" && key != "": // the quoted metric name
				name = key
			default:
				return "", nil, 0, fmt.Errorf("label %s without a value", key)
			}
			rest = strings.TrimLeft(rest, " \t")
			if rest != "" && rest[0] == ',' {
				rest = rest[1:]
			} else if rest == "" || rest[0] != '}' {
				return "", nil, 0, errors.New("expected ',' or '}' in label set")
			}
		}
	}
	if name == "" {
		return "", nil, 0, errors.New("sample without a metric name")
	}
	f := strings.Fields(rest)
	if len(f) == 0 || len(f) > 2 {
		return "", nil, 0, fmt.Errorf("%s: want a value and an optional timestamp, got %q", name, rest)
	}
	if value, err = strconv.ParseFloat(f[0], 64); err != nil {
		return "", nil, 0, fmt.Errorf("%s: bad value %q", name, f[0])
	}
	if len(f) == 2 {
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			return "", nil, 0, fmt.Errorf("%s: bad timestamp %q", name, f[1])
		}
	}
	return name, labels, value, nil
}

// cutQuoted cuts a double-quoted string with \\, \" and \n escapes off s.
func cutQuoted(s string) (string, string, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), s[i+1:], nil
		case '\\':
			if i+1 >= len(s) {
				return "", "", errors.New("unterminated string")
			}
			i++
			switch s[i] {
			case '\\', '"':
				b.WriteByte(s[i])
			case 'n':
				b.WriteByte('\n')
			default:
				return "", "", fmt.Errorf("invalid escape \\%c", s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", errors.New("unterminated string")
}

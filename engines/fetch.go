package engines

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Get fetches f from the engine at base (a base URL) and returns the JSON
// value at f.Key. A field the engine does not serve is an error.
func Get(ctx context.Context, c *http.Client, base string, f Field) (any, error) {
	if f.IsZero() {
		return nil, fmt.Errorf("the engine serves no such field")
	}
	if c == nil {
		c = &http.Client{Timeout: 5 * time.Second}
	}
	url := strings.TrimRight(base, "/") + f.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d: %.200s", url, resp.StatusCode, body)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return lookupKey(v, f.Key, url)
}

// lookupKey walks the dot-separated key through objects and arrays.
func lookupKey(v any, key, url string) (any, error) {
	if key == "" {
		return v, nil
	}
	for _, part := range strings.Split(key, ".") {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[part]; !ok {
				return nil, fmt.Errorf("GET %s: no %q in the answer (looking for .%s)", url, part, key)
			}
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(x) {
				return nil, fmt.Errorf("GET %s: no element %q in the answer (looking for .%s)", url, part, key)
			}
			v = x[i]
		default:
			return nil, fmt.Errorf("GET %s: .%s: %q is not inside an object or array", url, key, part)
		}
	}
	return v, nil
}

// VersionOf is the engine's version string, "" when it does not say (no
// Version field, or the request fails: a version is recorded, not needed).
func (p Profile) VersionOf(ctx context.Context, c *http.Client, base string) string {
	v, _ := Get(ctx, c, base, p.Version) // nil on any error, a zero Version included
	s, _ := v.(string)
	return s
}

// VocabOf is the engine's vocabulary size; 0 without error when the kind
// does not say it. A kind that says it but whose answer lacks it (or is
// not a positive integer) is an error: the prompts could not be checked.
func (p Profile) VocabOf(ctx context.Context, c *http.Client, base string) (int, error) {
	if p.Vocab.IsZero() {
		return 0, nil
	}
	v, err := Get(ctx, c, base, p.Vocab)
	if err != nil {
		return 0, fmt.Errorf("%s vocabulary size: %w", p.Name, err)
	}
	f, ok := v.(float64)
	if !ok || f < 1 || f != float64(int(f)) {
		return 0, fmt.Errorf("%s vocabulary size: %s is %v, not a positive integer", p.Name, p.Vocab, v)
	}
	return int(f), nil
}

// Package chromiumtest loads a local HTML file in a real headless Chromium
// (Debian's chromium) for tests of self-contained pages: it returns the DOM
// after the page's scripts ran and the lines the browser logged about the
// page (console errors, Content-Security-Policy refusals).
package chromiumtest

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"html"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// Page is what the browser made of one file.
type Page struct {
	DOM string // document.documentElement.outerHTML after the scripts ran
	// Problems are the console errors and refused loads the browser logged
	// (empty for a page that ran cleanly and fetched nothing).
	Problems []string
	Log      string // everything the browser wrote on stderr
}

// Find returns the path of chromium. Without it the test is skipped, or
// fails when MBENCH_REQUIRE_CHROMIUM=1 (as in CI).
func Find(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("MBENCH_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("chromiumtest: chromium not found and MBENCH_REQUIRE_CHROMIUM=1 (apt-get install chromium)")
	}
	t.Skip("chromiumtest: chromium not installed (set MBENCH_REQUIRE_CHROMIUM=1 to fail instead)")
	return ""
}

// problemRE matches what the browser logs about the page: every console
// message (chromium logs them at INFO whatever their level: an uncaught
// exception, console.error, a load the Content-Security-Policy refused).
// A page that runs cleanly and fetches nothing logs none.
var problemRE = regexp.MustCompile(`(?m)^\[[^\]]*:CONSOLE[:(]\d+\)?\].*$`)

// valueRE matches a table cell that carries its exact value:
// <td … data-KEY="ID" data-metric="M" data-value="V">TEXT</td>.
var valueRE = regexp.MustCompile(`<td[^>]* data-(cell|run)="([^"]*)" data-metric="([^"]*)" data-value="([^"]*)">([^<]*)</td>`)

// Value is one table cell with its exact value.
type Value struct {
	Value, Text string
}

// Values returns the table cells of the DOM that carry data-KEY (cell or
// run), data-metric and data-value: ID → metric → value.
func (p *Page) Values(key string) map[string]map[string]Value {
	out := map[string]map[string]Value{}
	for _, m := range valueRE.FindAllStringSubmatch(p.DOM, -1) {
		if m[1] != key {
			continue
		}
		if out[m[2]] == nil {
			out[m[2]] = map[string]Value{}
		}
		out[m[2]][m[3]] = Value{Value: m[4], Text: m[5]}
	}
	return out
}

// Count is the number of matches of the regular expression re in the DOM.
func (p *Page) Count(re string) int {
	return len(regexp.MustCompile(re).FindAllStringIndex(p.DOM, -1))
}

// quietFlags run a headless browser with the networking features that phone
// home switched off.
var quietFlags = []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-default-apps"}

// Load opens file (an absolute path) in a fresh headless browser profile
// (quietFlags) and returns the DOM after the scripts ran.
func Load(ctx context.Context, t testing.TB, browser, file string) *Page {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	profile := t.TempDir()
	cmd := exec.CommandContext(ctx, browser, append(quietFlags,
		"--user-data-dir="+profile, "--enable-logging=stderr", "--v=0", "--dump-dom", "file://"+filepath.ToSlash(file))...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "HOME="+profile) // no dbus, no keyring prompts
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromiumtest: %s: %v\nstderr:\n%s", file, err, stderr.String())
	}
	p := &Page{DOM: stdout.String(), Log: stderr.String()}
	p.Problems = problemRE.FindAllString(p.Log, -1)
	if len(p.DOM) == 0 {
		t.Fatalf("chromiumtest: %s: empty DOM\nstderr:\n%s", file, p.Log)
	}
	return p
}

// Links returns the targets of the page's links of class cls (<a
// class="CLS" href="…">), in the order of the DOM, as written in it.
func (p *Page) Links(cls string) []string {
	var out []string
	re := regexp.MustCompile(`<a class="` + regexp.QuoteMeta(cls) + `" href="([^"]*)"`)
	for _, m := range re.FindAllStringSubmatch(p.DOM, -1) {
		out = append(out, html.UnescapeString(m[1]))
	}
	return out
}

// Size is an image's natural size in pixels; 0×0 for one the browser
// could not load or decode.
type Size struct{ W, H int }

// ImageSizes shows each of srcs (URLs relative to dir, as a page in dir
// would name them: a link of a page there resolves the same) as an image
// of a page written into dir, opened in a fresh headless browser, and
// returns each one's natural size as the browser decoded it.
func ImageSizes(ctx context.Context, t testing.TB, browser, dir string, srcs []string) map[string]Size {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"></head><body>\n")
	for _, s := range srcs {
		e := html.EscapeString(s)
		fmt.Fprintf(&b, `<img data-src="%s" src="%s" onload="this.dataset.w=this.naturalWidth;this.dataset.h=this.naturalHeight" onerror="this.dataset.w=0;this.dataset.h=0">`+"\n", e, e)
	}
	b.WriteString("</body></html>\n")
	f, err := os.CreateTemp(dir, ".chromiumtest-images-*.html")
	if err != nil {
		t.Fatal(err)
	}
	name := f.Name()
	defer os.Remove(name)
	_, err = f.Write(b.Bytes())
	if err = cmp.Or(err, f.Close()); err != nil {
		t.Fatal(err)
	}
	p := Load(ctx, t, browser, name)
	out := map[string]Size{}
	for _, m := range imgSizeRE.FindAllStringSubmatch(p.DOM, -1) {
		w, _ := strconv.Atoi(m[2])
		h, _ := strconv.Atoi(m[3])
		out[html.UnescapeString(m[1])] = Size{W: w, H: h}
	}
	return out
}

// imgSizeRE matches an image of ImageSizes' page after it loaded or failed.
var imgSizeRE = regexp.MustCompile(`<img data-src="([^"]*)"[^>]*? data-w="(\d+)" data-h="(\d+)"`)

// String summarises a page for a failure message.
func (p *Page) String() string {
	return fmt.Sprintf("%d bytes of DOM, problems %q", len(p.DOM), p.Problems)
}

// Screenshot renders file (an absolute path) in a fresh headless browser
// window width pixels wide, as a person would see the page scrolled from
// top to bottom, and writes it under dir as name-01.png, name-02.png, …:
// tiles at most tileHeight pixels tall (a screen each), the blank space
// below the page trimmed. It returns the tiles' paths.
func Screenshot(ctx context.Context, t testing.TB, browser, file, dir, name string, width, tileHeight int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	profile := t.TempDir()
	full := filepath.Join(profile, "full.png")
	cmd := exec.CommandContext(ctx, browser, append(quietFlags, "--hide-scrollbars", "--force-device-scale-factor=1", fmt.Sprintf("--window-size=%d,%d", width, maxPageHeight),
		"--user-data-dir="+profile, "--screenshot="+full, "file://"+filepath.ToSlash(file))...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "HOME="+profile)
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromiumtest: screenshot of %s: %v\nstderr:\n%s", file, err, stderr.String())
	}
	f, err := os.Open(full)
	if err != nil {
		t.Fatalf("chromiumtest: screenshot of %s: %v\nstderr:\n%s", file, err, stderr.String())
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("chromiumtest: screenshot of %s: %v", file, err)
	}
	b := img.Bounds()
	bottom := b.Min.Y + 1
	for y := b.Max.Y - 1; y > b.Min.Y; y-- { // the last row that is not all background
		if !blankRow(img, y) {
			bottom = y + 1
			break
		}
	}
	if bottom >= b.Max.Y-1 {
		t.Logf("chromiumtest: %s fills the whole %d-pixel window: the screenshot may be cut", file, maxPageHeight)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, y := 1, b.Min.Y; y < bottom; i, y = i+1, y+tileHeight {
		tile := img.(interface {
			SubImage(image.Rectangle) image.Image
		}).SubImage(image.Rect(b.Min.X, y, b.Max.X, min(y+tileHeight, bottom)))
		path := filepath.Join(dir, fmt.Sprintf("%s-%02d.png", name, i))
		var buf bytes.Buffer
		if err := png.Encode(&buf, tile); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		out = append(out, path)
	}
	return out
}

// maxPageHeight is the window height a screenshot is taken at: taller than
// any report page, whose blank remainder is trimmed.
const maxPageHeight = 16000

// blankRow reports whether row y of img is one colour (the page's
// background below its content).
func blankRow(img image.Image, y int) bool {
	b := img.Bounds()
	r0, g0, b0, _ := img.At(b.Min.X, y).RGBA()
	for x := b.Min.X; x < b.Max.X; x++ {
		if r, g, bl, _ := img.At(x, y).RGBA(); r != r0 || g != g0 || bl != b0 {
			return false
		}
	}
	return true
}

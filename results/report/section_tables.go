package report

import (
	"cmp"
	"fmt"
	"strings"
)

// sectionTable is one table of a report section, written alike to report.md
// and report.html: the per-class and per-instance sections build their
// tables once and write them both ways.
type sectionTable struct {
	ID    string // the HTML table id
	Title string // the section's heading ("" for a table that continues the section above)
	Intro string
	Notes []string // paragraphs after the intro (in bold where they warn)
	Head  []string
	Rows  [][]string
}

// writeMD writes t as a markdown section (heading, intro, notes, table).
func (t sectionTable) writeMD(b *strings.Builder) {
	if t.Title != "" {
		fmt.Fprintf(b, "## %s\n\n", t.Title)
	}
	if t.Intro != "" {
		b.WriteString(t.Intro + "\n\n")
	}
	for _, n := range t.Notes {
		b.WriteString(n + "\n\n")
	}
	b.WriteString("| " + strings.Join(t.Head, " | ") + " |\n|" + strings.Repeat("---|", len(t.Head)) + "\n")
	for _, r := range t.Rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	b.WriteString("\n")
}

// tableSection is the report.md section of tables: f's tables, or, when f
// says there is nothing to show, one line under title saying why.
func tableSection(title string, f func(*reportView) ([]sectionTable, string)) mdSection {
	return func(b *strings.Builder, v *reportView) {
		ts, short := f(v)
		if short != "" {
			collapsed(b, title, "%s", short)
			return
		}
		for _, t := range ts {
			t.writeMD(b)
		}
	}
}

// classInstanceTables are the tables of the class and instance sections that have
// something to show, for report.html (markdown emphasis stripped).
func classInstanceTables(v *reportView) []sectionTable {
	var out []sectionTable
	for _, f := range []func(*reportView) ([]sectionTable, string){classTables, classComparisonTables, classFailureTables, prefixCacheTables, gpuUtilTables} {
		if ts, collapsedAs := f(v); collapsedAs == "" {
			out = append(out, ts...)
		}
	}
	for i := range out {
		t := &out[i]
		t.ID, t.Intro = cmp.Or(t.ID, fmt.Sprintf("section-table-%d", i)), plainText(t.Intro)
		for j, n := range t.Notes {
			t.Notes[j] = plainText(n)
		}
	}
	return out
}

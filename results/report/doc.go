// Package report draws an analysed sweep (results.Analysis) as the files a
// researcher reads: report.md, report.html (one self-contained page),
// tables.csv, instances.csv and the plots. The renderers compute nothing of
// the method and read no file: the runs' step and GPU logs, which
// report.html and the plots draw, come through the Logs seam. Export ties
// the three together for a sweep directory: package sweepdir reads the runs
// and writes the files, package results analyses, this package renders.
package report

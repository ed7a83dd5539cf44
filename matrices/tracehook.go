package matrices

// CheckTrace, when set, reads the trace file of a trace shape during Load,
// so that a malformed line is refused (as "bad trace: file:line: field: …"
// at the shape's line of the matrix) before anything launches. The trace
// format belongs to the load generator; mbench's main sets this to its
// parser, keeping this package free of it. Nil: only the file's existence
// is checked.
var CheckTrace func(path string) error

// Package plan decides what a sweep runs next and when it stops, from what
// has been measured: the block design (a seeded Williams square taken as
// mirror-image pairs of blocks, and how balanced the planned blocks are), the
// stopping rule on the comparisons (Next over a View of stored metric
// values), and the capacity search's next rates (Search) and rounds.
//
// It is pure: no I/O, no processes, no clock of its own. Its values (Block,
// Design, Round) are what sweep.json records as planned. The method and its
// reasons are in docs/design.md.
package plan

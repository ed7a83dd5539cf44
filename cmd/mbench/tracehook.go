package main

import (
	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/openloop"
)

// A matrix whose trace has a bad line is refused when it is loaded, with the
// load generator's own parser.
func init() {
	matrices.CheckTrace = func(path string) error {
		_, err := openloop.LoadTrace(path)
		return err
	}
}

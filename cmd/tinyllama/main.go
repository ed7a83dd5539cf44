// Command tinyllama writes a random-weight llama as a GGUF file for
// llama.cpp's llama-server: a model to measure a serving path with, not to
// read answers from (see package llamacpp). Its vocabulary is laid out like
// Llama-2's and it streams one ordinary token per chunk until max_tokens.
//
//	tinyllama -out tiny.gguf                             # 2 blocks × 128, 35 MB (the CI model)
//	tinyllama -out big.gguf -layers 8 -width 512 -heads 8 -f16=false
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/mbench/mbench/llamacpp"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "tinyllama:", err)
		os.Exit(2)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	m := llamacpp.TinyModel
	fs := flag.NewFlagSet("tinyllama", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "GGUF file to write (required; written atomically)")
	fs.IntVar(&m.Vocab, "vocab", m.Vocab, "vocabulary size (Llama-2 layout: unk, bos, eos, 256 bytes, ordinary tokens)")
	fs.IntVar(&m.Layers, "layers", m.Layers, "transformer blocks")
	fs.IntVar(&m.Width, "width", m.Width, "embedding length")
	fs.IntVar(&m.Heads, "heads", m.Heads, "attention heads")
	fs.IntVar(&m.KVHeads, "kv-heads", m.KVHeads, "key/value heads (0 = heads)")
	fs.IntVar(&m.FF, "ff", m.FF, "feed-forward length (0 = 4 × width)")
	fs.IntVar(&m.Context, "context", m.Context, "trained context length")
	fs.BoolVar(&m.F16, "f16", m.F16, "F16 weights instead of F32")
	fs.Uint64Var(&m.Seed, "seed", m.Seed, "weights seed")
	fs.StringVar(&m.Name, "name", m.Name, "general.name (default mbench-tiny-llama)")
	fs.BoolVar(&m.Ends, "ends", m.Ends, "steer toward </s>: every request that may end at end-of-sequence is a one-token answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *out == "" {
		return fmt.Errorf("-out: required")
	}
	if err := m.WriteFile(*out); err != nil {
		return fmt.Errorf("%s: %w", *out, err)
	}
	fi, err := os.Stat(*out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "tinyllama: %s: %d parameters, %d bytes\n", *out, m.Params(), fi.Size())
	fmt.Fprintln(stdout, *out)
	return nil
}

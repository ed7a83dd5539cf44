// Package vllm is the home of mbench_vllm, the Python package installed next
// to vLLM (a step-timing general plugin and a no-op KV connector). The Go
// package holds no code: its test runs the Python test suite with pytest, so
// `go test ./...` covers both languages.
package vllm

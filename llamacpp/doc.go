// Package llamacpp is what mbench needs to measure llama.cpp's
// llama-server without a model download or a 40-minute build: a writer of
// random-weight GGUF llamas (Model, TinyModel; cmd/tinyllama is its
// command) and, beside it, build-llama-server.sh, which builds llama-server
// from the npm packages node-llama-cpp (llama.cpp's source) and
// @node-llama-cpp/linux-x64 (its prebuilt libraries) into a cache
// directory keyed by version; its tests start that server (server_test.go).
// Nothing of llama.cpp is in this repository.
package llamacpp

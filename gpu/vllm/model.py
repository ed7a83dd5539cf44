#!/usr/bin/env python3
"""Writes a random-weight Llama for vLLM into DIR: config.json,
model.safetensors (bf16), generation_config.json and a tokenizer made here
(tokenizer.json + tokenizer_config.json), nothing from a model hub.

A model to measure a serving path with, not to read answers from (like
cmd/tinyllama's GGUF for llama-server). Its vocabulary is laid out like
Llama-2's, as tinyllama's: 0 <unk>, 1 <s>, 2 </s>, 3-258 the bytes
<0x00>..<0xFF>, then ordinary word tokens, so mbench's token-id prompts (ids
from 1,000 up) are ordinary tokens and every generated token decodes to a
word.

Usage: model.py DIR [--layers 8] [--width 512] [--heads 8] [--vocab 32000]
"""

import argparse
import json
import os


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--context", type=int, default=16384)
    ap.add_argument("--seed", type=int, default=20261203)
    a = ap.parse_args()

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    os.makedirs(a.dir, exist_ok=True)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = 3 + b
    for i in range(259, a.vocab):
        vocab[f"w{i}"] = i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   model_max_length=a.context)
    fast.save_pretrained(a.dir)

    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.width, intermediate_size=4 * a.width,
                      num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.heads,
                      max_position_embeddings=a.context, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                      tie_word_embeddings=False, torch_dtype="bfloat16")
    torch.manual_seed(a.seed)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(a.dir, safe_serialization=True)
    with open(os.path.join(a.dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}, f)
    n = sum(p.numel() for p in model.parameters())
    print(f"model: {a.dir}: llama {a.layers} x {a.width}, {a.heads} heads, vocab {a.vocab}, {n / 1e6:.1f} M parameters")


if __name__ == "__main__":
    main()

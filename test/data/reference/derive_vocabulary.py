#!/usr/bin/env python3
"""Copies a GGUF's metadata (no tensors) with tokenizer.ggml.pre replaced.

Used to test the Llama 3 ("llama-bpe") and Qwen2 pre-tokenizers against
llama.cpp on a real vocabulary when no such model is installed: SmolLM2's
tokens and merges, split by the other family's regex. llama-tokenize loads
vocabulary only, so no tensors are needed. Needs numpy and llama.cpp's
gguf-py (in the peer cache). Usage:
  derive_vocabulary.py SOURCE.gguf OUT.gguf PRE [GGUF_PY_DIR]
"""
import os, sys

source, out, pre = sys.argv[1:4]
sys.path.insert(0, sys.argv[4] if len(sys.argv) > 4 else os.path.expanduser(
    "~/.cache/spanc/peers/llama.cpp/gguf-py"))
import gguf  # noqa: E402

reader = gguf.GGUFReader(source)
writer = gguf.GGUFWriter(out, arch="llama")
for name, field in reader.fields.items():
    if name.startswith("GGUF.") or name == "general.architecture":
        continue
    value = pre if name == "tokenizer.ggml.pre" else field.contents()
    value_type = field.types[0]
    if value_type == gguf.GGUFValueType.ARRAY:
        writer.add_key_value(name, value, value_type, sub_type=field.types[-1])
    else:
        writer.add_key_value(name, value, value_type)
writer.write_header_to_file()
writer.write_kv_data_to_file()
writer.write_tensors_to_file()
writer.close()

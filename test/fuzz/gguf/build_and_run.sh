#!/usr/bin/env bash
# Builds the GGUF reader's libFuzzer target with clang++-14 (outside Bazel:
# Bazel's toolchain here is gcc, which has no libFuzzer) and runs it.
#
#   test/fuzz/gguf/build_and_run.sh [SECONDS]   # default 600
#
# The committed seed/found corpus is test/fuzz/gguf/corpus/; new inputs are
# written to a scratch folder and merged (minimised) back into it at the end.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
seconds="${1:-600}"
out="${FUZZ_OUT:-/tmp/spanc-gguf-fuzz}"
mkdir -p "$out/new"

clang++-14 -std=c++17 -O1 -g -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root" -I/usr/lib/llvm-14/include \
  -DPCRE2_CODE_UNIT_WIDTH=8 \
  "$here/GgufFuzzer.cpp" "$root/runtime/model/Gguf.cpp" \
  "$root/runtime/model/Quantization.cpp" "$root/runtime/model/ModelConfig.cpp" \
  "$root/runtime/model/Tokenizer.cpp" "$root/runtime/model/ChatTemplate.cpp" \
  -L/usr/lib/llvm-14/lib -lLLVMSupport -lLLVMDemangle -lpcre2-8 -lz -ltinfo \
  -lpthread \
  -o "$out/gguf_fuzzer"

# -rss_limit_mb guards against allocations sized by the input.
"$out/gguf_fuzzer" "$out/new" "$here/corpus" -max_total_time="$seconds" \
  -max_len=4096 -rss_limit_mb=1024 -timeout=10 -print_final_stats=1 \
  -artifact_prefix="$out/" 2>&1 | tail -n 40
"$out/gguf_fuzzer" -merge=1 "$here/corpus" "$out/new" 2>&1 | tail -n 2

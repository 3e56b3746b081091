#!/usr/bin/env bash
# Builds the libFuzzer targets with clang++-14 and ASan/UBSan, outside Bazel
# (Bazel's toolchain here is gcc, which has no libFuzzer).
#
#   test/fuzz/build.sh [OUT]        # default OUT: /tmp/spanc-fuzz
#   OUT/span_fuzzer test/fuzz/span_corpus -max_total_time=600
#   OUT/json_fuzzer test/fuzz/json_corpus -dict=test/fuzz/json.dict
#
# The ANTLR parser is generated into OUT, so nothing is written into the
# source tree.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-/tmp/spanc-fuzz}"
mkdir -p "$out/include/grammar" "$out/obj"

# The generated lexer and parser, as //grammar:span_antlr makes them.
if [[ ! -f "$out/include/grammar/SpanParser.cpp" ||
      "$root/grammar/Span.g4" -nt "$out/include/grammar/SpanParser.cpp" ]]; then
  cp "$root/grammar/Span.g4" "$out/include/grammar/Span.g4"
  (cd "$out/include/grammar" &&
   antlr4 -Dlanguage=Cpp -visitor -no-listener -package spanc::grammar \
     -Xexact-output-dir -o . Span.g4 >/dev/null &&
   rm -f Span.g4 ./*.interp ./*.tokens)
fi

# Debian's ANTLR 4.9 runtime headers do not compile with clang 14: a
# defaulted constructor of dfa::Vocabulary leaves const members without an
# initializer (gcc accepts it). Use a copy of the headers, patched.
if [[ ! -d "$out/antlr4-runtime" ]]; then
  cp -r /usr/include/antlr4-runtime "$out/antlr4-runtime"
  sed -i -E 's/(std::vector<std::string> const _[a-zA-Z]+Names);/\1{};/' \
    "$out/antlr4-runtime/Vocabulary.h"
fi

cxx=clang++-14
flags=(-std=c++17 -g -O1 -fno-omit-frame-pointer
       -fsanitize=fuzzer-no-link,address,undefined
       # LLVM is built without RTTI: UBSan's vptr check needs it.
       -fno-sanitize=vptr -fno-sanitize-recover=undefined
       -I"$root" -I"$out/include" -I"$out/antlr4-runtime"
       -I/usr/lib/llvm-14/include -w)
libs=(-L/usr/lib/llvm-14/lib -lLLVMSupport -lLLVMDemangle -lantlr4-runtime
      -lz -ltinfo -lpthread -ldl)

sources=(
  "$out/include/grammar/SpanLexer.cpp" "$out/include/grammar/SpanParser.cpp"
  "$out/include/grammar/SpanVisitor.cpp" "$out/include/grammar/SpanBaseVisitor.cpp"
  "$root"/ir/*.cpp
  "$root/frontend/SyntaxTree.cpp" "$root/frontend/Lowering.cpp"
  "$root/frontend/SpnlJson.cpp"
  "$root/passes/PassManager.cpp" "$root/passes/DeadOps.cpp"
  "$root/passes/DesugarChat.cpp" "$root/passes/PlusSimplify.cpp"
  "$root/passes/TreeReduce.cpp" "$root/passes/PlusDistribute.cpp"
  "$root/passes/CommonSubtrees.cpp" "$root/passes/BulkOrder.cpp"
)
objects=()
pids=()
for source in "${sources[@]}"; do
  object="$out/obj/$(echo "${source#"$root"/}" | tr '/' '_').o"
  objects+=("$object")
  # Rebuild when the source, any project header or this script changed.
  if [[ ! -f "$object" || "$source" -nt "$object" ||
        "$root/test/fuzz/build.sh" -nt "$object" ||
        -n "$(find "$root/ir" "$root/frontend" "$root/passes" \
                  "$root/test/fuzz" -name '*.h' -newer "$object" | head -1)" ]]; then
    "$cxx" "${flags[@]}" -c "$source" -o "$object" &
    pids+=($!)
    # Two cores, shared: at most two compiles at a time.
    if (( ${#pids[@]} >= 2 )); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
  fi
done
for pid in "${pids[@]}"; do wait "$pid"; done

for target in span json; do
  name="$(tr '[:lower:]' '[:upper:]' <<<"${target:0:1}")${target:1}"
  "$cxx" "${flags[@]/fuzzer-no-link/fuzzer}" \
    "$root/test/fuzz/${name}Fuzzer.cpp" "${objects[@]}" "${libs[@]}" \
    -o "$out/${target}_fuzzer"
done
echo "built $out/span_fuzzer $out/json_fuzzer"

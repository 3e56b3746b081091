#!/usr/bin/env bash
# Builds the libFuzzer targets with clang++-14 and ASan/UBSan, outside Bazel
# (Bazel's toolchain here is gcc, which has no libFuzzer):
#
#   span   .span source → IR → pipeline → plan      (SpanFuzzer.cpp)
#   json   spnl JSON → IR → pipeline → plan          (JsonFuzzer.cpp)
#   ir     textual IR → verifier → pipeline → plan   (IrFuzzer.cpp)
#   gguf   the GGUF reader, tokenizer, chat template (gguf/GgufFuzzer.cpp)
#   model  GGUF bytes through Model::load and a forward step
#          (gguf/ModelFuzzer.cpp)
#   http   one connection's bytes through spanc serve's ConnectionServer
#          (HttpFuzzer.cpp; httplib itself is Debian's uninstrumented
#          library, so coverage guides through our code only)
#
#   test/fuzz/build.sh [OUT] [TARGET...]   # default OUT: /tmp/spanc-fuzz, all
#   test/fuzz/run.sh TARGET SECONDS        # runs one, merges into its corpus
#
# Each target compiles the project sources its Bazel corpus replay test
# depends on (`bazel query`), so the lists follow the BUILD files. The
# ANTLR parser is generated into OUT, so nothing is written into the
# source tree. Objects are rebuilt when their source, a project header or
# this script changed.
set -euo pipefail
shopt -s nullglob
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-/tmp/spanc-fuzz}"
shift || true
targets=("$@")
if ((${#targets[@]} == 0)); then targets=(span json ir gguf model http); fi
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
       # The runtime's OpenMP is GCC's, as in the Bazel build.
       -fopenmp=libgomp
       -DPCRE2_CODE_UNIT_WIDTH=8
       -I"$root" -I"$out/include" -I"$out/antlr4-runtime"
       -I/usr/lib/llvm-14/include -w)
# Every target links the system libraries any of them uses; the linker
# keeps those a target needs.
libs=(-L/usr/lib/llvm-14/lib -lLLVMSupport -lLLVMDemangle -lz -ltinfo
      -Wl,--as-needed -lantlr4-runtime -lpcre2-8 -ldnnl -lxxhash
      -lcpp-httplib -lsqlite3 -Wl,--no-as-needed -lpthread -ldl)

# A target's sources are those of its corpus replay test in Bazel (the same
# harness linked with gcc and ReplayMain.cpp instead of libFuzzer), so the
# lists follow the BUILD files as sources move: the project's .cpp files
# among the test's dependencies, less the harness and the replay main.
sources_of() { # LABEL HARNESS: prints the absolute paths, one a line
  local label="$1" harness="$2"
  (cd "$root" && bazel query --noshow_progress \
     "kind('source file', deps($label))" 2>/dev/null) |
    grep -E '^//[^:]*:[^ ]+\.cpp$' | grep -v -e ':ReplayMain\.cpp$' \
      -e ":$(basename "$harness")\$" |
    sed -E 's#^//([^:]*):(.*)$#'"$root"'/\1/\2#; s#//#/#g'
}
# The lexer and parser the frontend targets also need, generated above.
antlr_sources=(
  "$out/include/grammar/SpanLexer.cpp" "$out/include/grammar/SpanParser.cpp"
  "$out/include/grammar/SpanVisitor.cpp" "$out/include/grammar/SpanBaseVisitor.cpp"
)

# The project's most recently changed header, found once: an object older
# than it is rebuilt (whatever folder the header is in; Bazel's output
# links, .git and the fuzz corpora are not searched).
newest_header="$(find "$root" \( -name 'bazel-*' -o -name .git -o \
                               -name '*corpus' \) -prune -o \
                      -name '*.h' -printf '%T@ %p\n' |
                 sort -n | tail -1 | cut -d' ' -f2-)"

# Compiles SOURCES... into objects (two at a time: the machine is shared)
# and sets `objects` to their paths.
compile() {
  objects=()
  local pids=() source object
  for source in "$@"; do
    object="$out/obj/$(echo "${source#"$root"/}" | tr '/' '_').o"
    objects+=("$object")
    if [[ ! -f "$object" || "$source" -nt "$object" ||
          "$root/test/fuzz/build.sh" -nt "$object" ||
          "$newest_header" -nt "$object" ]]; then
      "$cxx" "${flags[@]}" -c "$source" -o "$object" &
      pids+=($!)
      if (( ${#pids[@]} >= 2 )); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
    fi
  done
  local pid
  for pid in "${pids[@]}"; do wait "$pid"; done
}

link() { # NAME HARNESS EXTRA_LIBS...
  local name="$1" harness="$2"
  shift 2
  "$cxx" "${flags[@]/fuzzer-no-link/fuzzer}" "$harness" "${objects[@]}" \
    "${libs[@]}" "$@" -o "$out/${name}_fuzzer"
  echo "built $out/${name}_fuzzer"
}

for target in "${targets[@]}"; do
  case "$target" in
  span | json | ir)
    harness="$(tr '[:lower:]' '[:upper:]' <<<"${target:0:1}")${target:1}"
    [[ "$target" == ir ]] && harness=Ir
    harness="$root/test/fuzz/${harness}Fuzzer.cpp"
    label="//test/fuzz:${target}_corpus_test" generated=("${antlr_sources[@]}")
    ;;
  gguf)
    harness="$root/test/fuzz/gguf/GgufFuzzer.cpp"
    label=//test/fuzz/gguf:gguf_corpus_test generated=()
    ;;
  model)
    harness="$root/test/fuzz/gguf/ModelFuzzer.cpp"
    label=//test/fuzz/gguf:model_corpus_test generated=()
    ;;
  http)
    harness="$root/test/fuzz/HttpFuzzer.cpp"
    label=//test/fuzz:http_corpus_test generated=()
    ;;
  *)
    echo "unknown target '$target' (span, json, ir, gguf, model, http)" >&2
    exit 2
    ;;
  esac
  mapfile -t sources < <(sources_of "$label" "$harness")
  if ((${#sources[@]} == 0)); then
    echo "no sources for $label (does 'bazel query' work here?)" >&2
    exit 1
  fi
  compile "${sources[@]}" "${generated[@]}"
  link "$target" "$harness"
done

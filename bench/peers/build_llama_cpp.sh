#!/usr/bin/env bash
# Builds the reference peer (llama.cpp, from the llama-cpp-python sdist) in a
# cache outside the repository; idempotent: a finished build is reused.
#
#   bench/peers/build_llama_cpp.sh            # build (or reuse) the peer
#   LLAMA_CPP_PYTHON_VERSION=0.3.36 ...       # pin another sdist version
#   LLAMA_CPP_ISA=avx2 ...                    # llama-bench built for AVX2
#                                             # only (beside spanc --isa=avx2:
#                                             # what an AVX2 host runs)
#   LLAMA_CPP_ISA=avx512 ...                  # AVX-512 with VNNI, no BF16 or
#                                             # AMX (beside spanc --isa=avx512:
#                                             # a Cascade/Ice Lake Xeon)
#
# Prints the build folder (holding bin/llama-*) on its last line of stdout.
# See ../../../shared/PEERS.md for why each flag is here. Nothing built here
# is ever committed.
set -euo pipefail

version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
cache="${SPANC_PEERS_DIR:-$HOME/.cache/spanc/peers}"
source_dir="$cache/llama.cpp"
build_dir="$source_dir/build"
jobs="${JOBS:-2}"
targets=(llama-tokenize llama-bench llama-server llama-perplexity)
isa_flags=(-DGGML_NATIVE=ON)
# ggml's x86 variants below name every extension: nothing past the level.
fixed_isa=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
  -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512_VBMI=OFF
  -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
  -DGGML_AMX_BF16=OFF)
case "${LLAMA_CPP_ISA:-native}" in
  native) ;;
  avx2)
    # AVX2 hosts: no AVX-512, VNNI or AMX code at all.
    build_dir="$source_dir/build-avx2"
    targets=(llama-bench)
    isa_flags=("${fixed_isa[@]}" -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF) ;;
  avx512)
    # AVX-512 hosts without BF16 or AMX (Intel Cascade Lake, Ice Lake):
    # AVX-512 F/BW/DQ/VL and VNNI.
    build_dir="$source_dir/build-avx512"
    targets=(llama-bench)
    isa_flags=("${fixed_isa[@]}" -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON) ;;
  *)
    echo "build_llama_cpp.sh: LLAMA_CPP_ISA must be native, avx2 or avx512," \
      "not '$LLAMA_CPP_ISA'" >&2
    exit 1 ;;
esac

mkdir -p "$cache"

# 1. Source: the sdist carries llama.cpp under vendor/llama.cpp.
if [[ ! -f "$source_dir/.spanc-version" ||
      "$(cat "$source_dir/.spanc-version")" != "$version" ]]; then
  download="$cache/sdist"
  rm -rf "$download" "$source_dir"
  mkdir -p "$download"
  pip download --quiet --no-deps --no-binary :all: \
    --dest "$download" "llama-cpp-python==$version"
  tar -xzf "$download"/llama_cpp_python-"$version".tar.gz -C "$download"
  mv "$download/llama_cpp_python-$version/vendor/llama.cpp" "$source_dir"
  rm -rf "$download"
  echo "$version" >"$source_dir/.spanc-version"
fi

# 2. The AMX tile-configuration fix (PEERS.md): gcc 12 drops the stores that
#    fill the tile config before _tile_loadconfig. Add a compiler memory
#    barrier before each call unless the vendored source already has one.
mmq="$source_dir/ggml/src/ggml-cpu/amx/mmq.cpp"
if [[ -f "$mmq" ]] && ! grep -q 'spanc: AMX tile config barrier' "$mmq"; then
  if grep -q '_tile_loadconfig' "$mmq" &&
     ! grep -B2 '_tile_loadconfig' "$mmq" | grep -q 'asm volatile'; then
    python3 - "$mmq" <<'PY'
import re, sys
path = sys.argv[1]
text = open(path).read()
def patch(match):
    indent, argument = match.group(1), match.group(2)
    return (f'{indent}/* spanc: AMX tile config barrier (upstream PR #26954) */\n'
            f'{indent}asm volatile("" : : "r"({argument}) : "memory");\n'
            f'{match.group(0)}')
text, count = re.subn(r'^([ \t]*)_tile_loadconfig\(([^;]*)\);', patch, text,
                      flags=re.M)
open(path, 'w').write(text)
print(f'build_llama_cpp.sh: applied the AMX barrier at {count} call(s)',
      file=sys.stderr)
PY
  else
    echo "build_llama_cpp.sh: AMX barrier already present upstream" >&2
  fi
fi

# 3. Configure offline and build only what the benchmarks and tests use.
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  cmake -S "$source_dir" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release \
    "${isa_flags[@]}" -DLLAMA_CURL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF >&2
fi
nice -n 10 cmake --build "$build_dir" -j"$jobs" --target "${targets[@]}" >&2
echo "$build_dir"

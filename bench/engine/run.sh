#!/usr/bin/env bash
# bench/engine/run.sh — spanc's CPU engine beside llama.cpp (llama-bench) on
# the same GGUF, same threads, in one run: pp512 and tg128, several rounds
# alternating the two engines, medians with spread and peak RSS; then the
# long prompts (pp4096, pp8192) and decoding after 4 096 tokens of context
# (tg128 @ d4096) in fewer rounds, with each prefill's time per FLOP
# beside pp512's; on an AMX host, spanc's prompt GEMMs on the
# borrowed 4/8-bit weights beside a bf16 copy. Writes
# bench/results/engine.md and engine.png.
#
#   bench/engine/run.sh [--rounds=N] [--reps=N] [--threads=N] [--model=FILE]
#                       [--single-thread-rounds=N]  (default 3; 0: no 1-thread table)
#                       [--pp=512,4096,8192] [--long-rounds=N] (default 2)
#                       [--weights-rounds=N] (default 3; 0: no weights table)
#                       [--depth=N] (default 4096: tg128 @ d4096 in the long
#                                    rounds, llama-bench's -d; 0: none)
#                       [--isa=avx2|avx512] (spanc capped at that kernel
#                                    path beside llama.cpp built for it:
#                                    what an AVX2 host, or an AVX-512 host
#                                    without BF16 (Cascade/Ice Lake), runs;
#                                    writes engine-avx2.md / engine-avx512.md)
#                       [--out=NAME] (results bench/results/NAME.md and
#                                    NAME.png: one per host class, e.g.
#                                    engine-zen3; default engine, or
#                                    engine-ISA with --isa)
#
# llama.cpp is built (or reused) by bench/peers/build_llama_cpp.sh in a cache
# outside the repository. BAZEL_OUTPUT_BASE / BAZEL_SYMLINK_PREFIX select a
# private Bazel output base (see the README).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
rounds=5
reps=3
threads=2
single=3
pp=512,4096,8192
long_rounds=2
weights_rounds=3
depth=4096
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
isa=
out=
for arg in "$@"; do
  case "$arg" in
    --rounds=*) rounds="${arg#*=}" ;;
    --reps=*) reps="${arg#*=}" ;;
    --threads=*) threads="${arg#*=}" ;;
    --single-thread-rounds=*) single="${arg#*=}" ;;
    --model=*) model="${arg#*=}" ;;
    --pp=*) pp="${arg#*=}" ;;
    --long-rounds=*) long_rounds="${arg#*=}" ;;
    --weights-rounds=*) weights_rounds="${arg#*=}" ;;
    --depth=*) depth="${arg#*=}" ;;
    --isa=avx2 | --isa=avx512) isa="${arg#*=}" ;;
    --out=*) out="bench/results/${arg#*=}" ;;
    *) echo "run.sh: unknown argument $arg" >&2; exit 1 ;;
  esac
done
[[ -f $model ]] || { echo "run.sh: model not found: $model" >&2; exit 1; }

if [[ -n $isa ]]; then
  # Every spanc this script starts runs capped there (CpuFeatures.h).
  export SPANC_ISA=$isa LLAMA_CPP_ISA=$isa
  out="${out:-bench/results/engine-$isa}"
fi
out="${out:-bench/results/engine}"
[[ $out =~ ^bench/results/[A-Za-z0-9_-]+$ ]] ||
  { echo "run.sh: --out takes a name of letters, digits, - and _" >&2; exit 1; }
peer_dir="$(bench/peers/build_llama_cpp.sh | tail -n 1)"
llama_bench="$peer_dir/bin/llama-bench"
[[ -x $llama_bench ]] || { echo "run.sh: no $llama_bench" >&2; exit 1; }

startup=()
build=()
if [[ -n ${BAZEL_OUTPUT_BASE:-} ]]; then startup+=("--output_base=$BAZEL_OUTPUT_BASE"); fi
if [[ -n ${BAZEL_SYMLINK_PREFIX:-} ]]; then build+=("--symlink_prefix=$BAZEL_SYMLINK_PREFIX"); fi
bazel "${startup[@]}" build "${build[@]}" //tools/spanc
spanc="$(bazel "${startup[@]}" info "${build[@]}" bazel-bin 2>/dev/null)/tools/spanc/spanc"

mkdir -p bench/results
# Debian's python3 has matplotlib (python3-matplotlib); a pyenv python may not.
python=/usr/bin/python3
[[ -x $python ]] || python=python3
"$python" bench/engine/compare.py --spanc="$spanc" --llama-bench="$llama_bench" \
  --model="$model" --threads="$threads" --rounds="$rounds" --reps="$reps" \
  --single-thread-rounds="$single" --pp="$pp" --long-rounds="$long_rounds" \
  --weights-rounds="$weights_rounds" --depth="$depth" \
  --peer-dir="$peer_dir" --peer-isa="${isa:-native}" --out="$out"
# Decode cost in CPU time (robust to the shared machine's load).
{
  echo
  echo "## Decode cost in CPU time, one thread (bench/engine/cpu_per_token.sh)"
  echo
  bench/engine/cpu_per_token.sh "$spanc" "$llama_bench" "$model" 3
} | tee -a "$out.md"

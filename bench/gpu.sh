#!/usr/bin/env bash
# bench/gpu.sh — the CUDA backend's one prepared run on a GPU machine (the
# H200 the device tool lends; docs/ARCHITECTURE.md, "Devices"). It proves
# the carried build works there, runs the GPU tests, checks GPU answers
# against the CPU's, then measures at the paper's scale on a synthetic
# Llama-3-8B-shape model it generates there, and writes gpu.md (and its
# log and raw rows) into $OUT (bench/results/gpu/ when run by hand).
#
# How to run it (bench/README.md, "GPU"):
#   1. here:  bench/gpu_pack.sh          (builds and packs .gpu/, ~13 MiB)
#   2. the device tool:
#        run(command="bash bench/gpu.sh", carry=[".gpu"], timeout_s=600)
#   3. copy $OUT/gpu.md to bench/results/gpu.md and commit it.
#
# The machine is bare: nvcc, CMake, PyTorch with the nvidia-* wheels, no
# Bazel, no Debian libraries, no network. The pack brings spanc, the GPU
# test binaries, the model generator and their libraries; CUDA's runtime
# and cuBLAS(Lt) come from the machine. Every step has its own timeout and
# the whole fits the tool's 10 minutes; a failed step is reported and the
# next one still runs.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$root/bench/results/gpu}"
mkdir -p "$out"
work=/tmp/spanc-gpu
rm -rf "$work"
mkdir -p "$work/results" "$work/test/data/synthetic"
log="$out/gpu.log"
report="$work/report.md"
: > "$log"
: > "$report"
started=$(date +%s)

say() { echo "$*" | tee -a "$log"; }
# step NAME TIMEOUT COMMAND...: runs with a timeout, output to the log,
# one row of the steps table.
steps="| step | status | seconds |\n|---|---|---|\n"
step() {
  local name=$1 limit=$2
  shift 2
  say "=== $name (timeout ${limit}s)"
  local begin=$(date +%s) status
  if declare -F "$1" > /dev/null; then
    # A function of this script: timeout runs programs, so a child shell
    # gets its definition (the variables it reads are exported).
    timeout --kill-after=5 "$limit" bash -o pipefail -c \
      "$(declare -f "$1"); $*" >> "$log" 2>&1
  else
    timeout --kill-after=5 "$limit" "$@" >> "$log" 2>&1
  fi
  status=$?
  local took=$(( $(date +%s) - begin ))
  local word="ok"
  (( status == 124 || status == 137 )) && word="TIMED OUT"
  (( status != 0 && status != 124 && status != 137 )) && word="FAILED ($status)"
  steps+="| $name | $word | $took |\n"
  say "=== $name: $word in ${took}s"
  return $status
}

# --- 0. Unpack and prove the carried build runs here. ---------------------
pack="$root/.gpu/spanc-gpu.tar.xz"
if [[ ! -f $pack ]]; then
  say "no $pack: run bench/gpu_pack.sh first and carry .gpu"
  exit 1
fi
tar -C "$work" -xJf "$pack" 2>> "$log" ||
  python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
    "$pack" "$work" || { say "cannot unpack $pack"; exit 1; }
cudadirs=""
for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           $(python3 -c 'import glob, os, nvidia; print(" ".join(sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], "*", "lib")))))' 2>/dev/null); do
  [[ -d $dir ]] && cudadirs+="$dir:"
done
export LD_LIBRARY_PATH="$work/lib:${cudadirs}${LD_LIBRARY_PATH:-}"
export SPANC_ROOT="$root"
spanc="$work/bin/spanc"
export root work spanc
proof() {
  uname -a
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm \
    --format=csv || true
  echo "pack built from commit $(cat "$work/COMMIT")"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd "$spanc"
  if ldd "$spanc" | grep "not found"; then
    echo "a library is missing"
    return 1
  fi
  "$spanc" --version
  "$spanc" run --help | grep -q -- --device
}
step "carried build runs (ldd, driver, spanc --version)" 30 proof ||
  { say "the carried build does not run here; see gpu.log"; exit 1; }
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)

# --- 1. The synthetic models, made here by the carried generator. ---------
make_models() {
  "$work/bin/make_tiny_model_gguf" --arch=llama "$work/test/data/synthetic/tiny-llama-synthetic.gguf" &&
    "$work/bin/make_tiny_model_gguf" --arch=qwen2 "$work/test/data/synthetic/tiny-qwen2-synthetic.gguf"
}
step "tiny synthetic models" 30 make_models

# --- 2. The GPU tests (kernels and backend; they skip without a device). --
tests_summary=""
run_tests() {
  local failed=0
  cd "$work"
  for test in "$work"/bin/*_test; do
    local name=$(basename "$test")
    if "$test" --gtest_brief=0 > "$work/results/$name.txt" 2>&1; then
      tests_summary+="| $name | passed | $(grep -c '^\[       OK \].* ms)$' "$work/results/$name.txt") | $(grep -c '^\[  SKIPPED \].* ms)$' "$work/results/$name.txt") |\n"
    else
      failed=1
      tests_summary+="| $name | FAILED | $(grep -c '^\[       OK \].* ms)$' "$work/results/$name.txt") | $(grep -c '^\[  FAILED  \].* ms)$' "$work/results/$name.txt") failed |\n"
    fi
    cat "$work/results/$name.txt"
  done
  echo -e "$tests_summary" > "$work/results/tests.md"
  return $failed
}
step "GPU tests" 120 run_tests

# --- 3. GPU answers = CPU answers at temperature 0. -----------------------
cat > "$work/equality.span" <<'SPAN'
let pool = """The block pool owns every block of the KV cache. When it is full
it evicts the least recently used block that no request references."""
let rope = """Rotary position embeddings rotate every key by an angle that
grows with its position; a cached span can be reused at another offset."""
query ab {
  gen(max_tokens = 24, temperature = 0) {
    system "Answer in one sentence."
    plus { fragment pool fragment rope }
    user "What happens when the pool is full?"
  }
}
query ba {
  gen(max_tokens = 24, temperature = 0) {
    system "Answer in one sentence."
    plus { fragment rope fragment pool }
    user "What happens when the pool is full?"
  }
}
SPAN
equality_rows=""
equality() {
  local ok=0 model
  for model in "$work/test/data/synthetic/tiny-llama-synthetic.gguf" \
               "$work/test/data/synthetic/tiny-qwen2-synthetic.gguf" \
               "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"; do
    [[ -f $model ]] || continue
    for relocation in rope-in-kernel rerope; do
      "$spanc" run "$work/equality.span" -m "$model" --device=cpu \
        --relocation=$relocation --kv-precision=f32 --batch-invariant --json \
        > "$work/results/cpu.json" || return 1
      "$spanc" run "$work/equality.span" -m "$model" --device=cuda \
        --relocation=$relocation --json > "$work/results/gpu.json" || return 1
      local verdict
      verdict=$(python3 - "$work/results/cpu.json" "$work/results/gpu.json" <<'PY'
import json, sys
cpu, gpu = (json.load(open(p)) for p in sys.argv[1:3])
def tokens(result):
    return {c["query"]: c["tokens"] for c in result["calls"]}
a, b = tokens(cpu), tokens(gpu)
same = sum(a[q] == b[q] for q in a)
first = min(next((i for i, (x, y) in enumerate(zip(a[q], b[q])) if x != y),
                 min(len(a[q]), len(b[q]))) for q in a)
print(f"{same}/{len(a)} equal" +
      ("" if same == len(a) else f", first difference at token {first}"))
sys.exit(0 if same == len(a) else 3)
PY
) || ok=1
      echo "$(basename "$model") $relocation: $verdict"
      equality_rows+="| $(basename "$model") | $relocation | $verdict |\n"
    done
  done
  echo -e "$equality_rows" > "$work/results/equality.md"
  return $ok
}
step "GPU answers = CPU answers (temperature 0)" 60 equality

# --- 4. The paper's scale: a Llama-3-8B-shape model, made here. -----------
big="$work/llama3-8b-shape-q8_0.gguf"
# GPU_SH_SMALL=1: skip this part (a dry run of the script on a machine
# without a GPU).
if [[ -z ${GPU_SH_SMALL:-} ]]; then
  step "generate the Llama-3-8B-shape model (Q8_0, 7.4 GB)" 150 \
    "$work/bin/make_tiny_model_gguf" --arch=llama --shape=llama3-8b \
    --type=q8_0 "$big"
fi
if [[ -z ${GPU_SH_SMALL:-} && -f $big ]]; then
  step "prefill and relocation rates (spanc bench device)" 100 \
    "$spanc" bench device --device=cuda -m "$big" -r 3 \
      --set tokens=512,2048,8192,32768 --set moves=64,512,4096 \
      --results "$work/results"
  # 1 to 32 documents of 2857 tokens; budget-s stops starting counts so the
  # table is written before the step's timeout.
  step "RAG TTFT: stock vs span miss vs span hit (spanc bench rag)" 210 \
    "$spanc" bench rag --device=cuda -m "$big" \
      --set docs=1,2,4,8,16,32 --set doc-tokens=2857 --set reps=1 \
      --set peer=off --set modes=none --set cache-tokens=200000 \
      --set step-tokens=2048 --set budget-s=150 --results "$work/results"
fi

# --- The report. ----------------------------------------------------------
{
  echo "# CUDA backend on a GPU (bench/gpu.sh)"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), ${gpu:-no GPU found}; pack from" \
       "commit $(cat "$work/COMMIT"), $(du -m "$pack" | cut -f1) MiB carried;" \
       "$(( $(date +%s) - started )) s in all."
  echo
  echo "## Steps"
  echo
  echo -e "$steps"
  echo "## GPU tests"
  echo
  echo "| binary | result | passed | skipped / failed |"
  echo "|---|---|---|---|"
  cat "$work/results/tests.md" 2>/dev/null
  echo "## GPU answers against the CPU's (temperature 0)"
  echo
  echo "CPU: f32 GEMMs and f32 K/V (the reference); GPU: bf16 weights, f16 K/V."
  echo "SmolLM2 (98 MB) is not carried (the tool carries 64 MiB): its row"
  echo "appears only where the machine has models/."
  echo
  echo "| model | relocation | answers |"
  echo "|---|---|---|"
  cat "$work/results/equality.md" 2>/dev/null
  echo "## Prefill and relocation (Llama-3-8B shape, Q8_0 → bf16 on the GPU)"
  echo
  if [[ -f $work/results/device-cuda.md ]]; then
    sed -n '/^Model:/,$p' "$work/results/device-cuda.md"
  else
    echo "(did not run)"
  fi
  echo
  echo "## RAG microbenchmark (2857-token documents)"
  echo
  if [[ -f $work/results/rag.md ]]; then
    sed -n '/^## Setup/,$p' "$work/results/rag.md"
  else
    echo "(did not run)"
  fi
} > "$report"
cp "$report" "$out/gpu.md"
cp "$work/results/device-cuda.tsv" "$work/results/rag.tsv" "$out/" 2>/dev/null
cat "$out/gpu.md"

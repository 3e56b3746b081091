#!/usr/bin/env bash
# bench/gpu.sh — the CUDA backend's one prepared run on a GPU machine (the
# H200 the device tool lends; docs/ARCHITECTURE.md, "Devices"). It proves
# the carried build works there, runs the GPU tests, checks GPU answers
# against the CPU's, runs SmolLM2 there when its parts came (answers, RAG
# hit, accuracy), then measures at the paper's scale on a synthetic
# Llama-3-8B-shape model it generates there, and writes gpu.md (and its
# log and raw rows) into $OUT (bench/results/gpu/ when run by hand).
#
# How to run it (bench/README.md, "GPU"):
#   1. here:  bench/gpu_pack.sh   (packs .gpu/, ~16 MiB, and SmolLM2's three
#             parts .gpu-model-1..3, 31 MiB each)
#   2. the device tool, four calls one right after the other (a warm
#      machine keeps what earlier calls carried for 30 s):
#        run(command="ls .gpu-model-N", carry=[".gpu-model-N"]), N = 1, 2, 3
#        run(command="GPU_SH_SECONDS=370 bash bench/gpu.sh", carry=[".gpu"],
#            timeout_s=400)
#   3. copy $OUT/gpu.md to bench/results/gpu.md and commit it.
# GPU_SH_QUICK=1 with step 2's last call alone (no model parts): the GPU
# tests and the 8B-shape prefill with its op profile, in ~2 minutes.
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

# The tool stops a command at 600 s; every step ends by then, and the
# report is rewritten after each, so a stopped run still returns one.
deadline=$(( started + ${GPU_SH_SECONDS:-570} ))

say() { echo "$*" | tee -a "$log"; }
# step NAME TIMEOUT COMMAND...: runs with a timeout (cut to what is left
# before the deadline), output to the log, one row of the steps table.
steps="| step | status | seconds |\n|---|---|---|\n"
step() {
  local name=$1 limit=$2
  shift 2
  local left=$(( deadline - $(date +%s) ))
  (( limit > left )) && limit=$left
  if (( limit < 5 )); then
    steps+="| $name | not run (out of time) | 0 |\n"
    say "=== $name: not run, out of time"
    write_report
    return 1
  fi
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
  write_report
  return $status
}

# --- The report (rewritten after every step). -------------------------------
write_report() {
{
  echo "# CUDA backend on a GPU (bench/gpu.sh)"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), ${gpu:-no GPU found}; pack from" \
       "commit $(cat "$work/COMMIT" 2>/dev/null), $(du -m "$pack" | cut -f1) MiB" \
       "carried; $(( $(date +%s) - started )) s so far."
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
  echo "SmolLM2 (98 MB) has rows where its three parts were carried"
  echo "(bench/gpu_pack.sh) or the machine has models/. A difference the"
  echo "CPU's own bf16 path also makes at or before that token is a near tie."
  echo
  echo "| model | relocation | answers |"
  echo "|---|---|---|"
  cat "$work/results/equality.md" 2>/dev/null
  echo "## SmolLM2-135M-Instruct on the GPU"
  echo
  if [[ -f $work/results/smol-answers.md ]]; then
    echo "examples/rag.span, \`spanc run --repeat 2\` (default span mode):"
    echo
    echo "| device | cache | answer | reused / prompt | TTFT (ms) |"
    echo "|---|---|---|---|---|"
    cat "$work/results/smol-answers.md"
  else
    echo "(did not run: the model was not carried)"
  fi
  local smolpart
  for smolpart in rag accuracy; do
    if [[ -f $work/results/smol-$smolpart/$smolpart.md ]]; then
      echo
      echo "### spanc bench $smolpart --device=cuda"
      echo
      tail -n +2 "$work/results/smol-$smolpart/$smolpart.md" | sed 's/^## /#### /'

    fi
  done
  echo
  echo "## Prefill and relocation (Llama-3-8B shape, Q8_0 → bf16 on the GPU)"
  echo
  if [[ -f $work/results/device-cuda.md ]]; then
    sed -n '/^Model:/,$p' "$work/results/device-cuda.md"
  else
    echo "(did not run)"
  fi
  if [[ -f $work/results/simt/device-cuda.md ]]; then
    echo
    echo "The same prefill with SPANC_CUDA_ATTENTION=simt (the f32 SIMT"
    echo "attention kernel; one repetition):"
    echo
    sed -n '/^| prefill tokens | tokens/,/^$/p' "$work/results/simt/device-cuda.md"
    echo
    echo "Where its prefill's time goes (SIMT):"
    echo
    sed -n '/^| prefill tokens | ms/,/^$/p' "$work/results/simt/device-cuda.md"
  fi
  local part
  for part in small large; do
    echo
    echo "## RAG microbenchmark, 2857-token documents ($part counts)"
    echo
    if [[ -f $work/results/rag-$part/rag.md ]]; then
      sed -n '/^## Setup/,$p' "$work/results/rag-$part/rag.md"
    else
      echo "(did not run)"
    fi
  done
} > "$report"
cp "$report" "$out/gpu.md"
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
# Wherever else the CUDA 13 runtime and cuBLAS(Lt) are (the wheels' layout
# differs between CUDA versions).
for dir in $(find /usr/local/cuda* \
               $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) \
               \( -name 'libcudart.so.13*' -o -name 'libcublas.so.13*' \
                  -o -name 'libcublasLt.so.13*' \) 2>/dev/null |
             xargs -r -n1 dirname | sort -u); do
  [[ :$cudadirs: == *:$dir:* ]] || cudadirs+="$dir:"
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
  "$spanc" run --help > "$work/run-help.txt" &&
    grep -q -- --device "$work/run-help.txt"
}
step "carried build runs (ldd, driver, spanc --version)" 30 proof ||
  { say "the carried build does not run here; see gpu.log"; exit 1; }
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)

# SmolLM2, where bench/gpu_pack.sh's three parts were carried (or the
# machine has models/): joined and checked against the sha256 made here.
smol=""
if [[ -f $root/.gpu-model-1/part && -f $root/.gpu-model-2/part &&
      -f $root/.gpu-model-3/part ]]; then
  mkdir -p "$work/models"
  cat "$root"/.gpu-model-{1,2,3}/part > "$work/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  if [[ $(sha256sum "$work/models/SmolLM2-135M-Instruct.Q4_1.gguf" | cut -d' ' -f1) == \
        $(cat "$root/.gpu-model-3/SHA256") ]]; then
    smol="$work/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    # The GPU tests look for it under $SPANC_ROOT/models.
    mkdir -p "$root/models"
    [[ -e $root/models/SmolLM2-135M-Instruct.Q4_1.gguf ]] ||
      ln -s "$smol" "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    say "SmolLM2 joined from three parts, sha256 matches"
  else
    say "SmolLM2 parts do not match their sha256: its rows are skipped"
  fi
elif [[ -f $root/models/SmolLM2-135M-Instruct.Q4_1.gguf ]]; then
  smol="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
fi
export smol

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
  # One test binary: its log, its row in the summary (defined in here: step
  # hands the child shell this function's text alone).
  run_one() {
    local label=$1 log=$2
    shift 2
    local row
    if "$@" --gtest_brief=0 > "$log" 2>&1; then
      row="passed | $(grep -c '^\[       OK \].* ms)$' "$log") | $(grep -c '^\[  SKIPPED \].* ms)$' "$log")"
    else
      failed=1
      row="FAILED | $(grep -c '^\[       OK \].* ms)$' "$log") | $(grep -c '^\[  FAILED  \].* ms)$' "$log") failed"
    fi
    tests_summary+="| $label | $row |\n"
    cat "$log"
  }
  for test in "$work"/bin/*_test; do
    local name=$(basename "$test")
    run_one "$name" "$work/results/$name.txt" "$test"
  done
  # The backend's whole-model tests again on the f32 SIMT attention (the
  # tensor-core kernel is the default).
  run_one "cuda_backend_test (SPANC_CUDA_ATTENTION=simt)" \
    "$work/results/cuda_backend_test_simt.txt" \
    env SPANC_CUDA_ATTENTION=simt "$work/bin/cuda_backend_test"
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
               ${smol:+"$smol"}; do
    [[ -f $model ]] || continue
    for relocation in rope-in-kernel rerope; do
      "$spanc" run "$work/equality.span" -m "$model" --device=cpu \
        --relocation=$relocation --kv-precision=f32 --batch-invariant --json \
        > "$work/results/cpu.json" || return 1
      # The CPU's own default path (bf16 GEMMs, f16 K/V): where it too
      # leaves the f32 reference, the token is a near tie at bf16.
      "$spanc" run "$work/equality.span" -m "$model" --device=cpu \
        --relocation=$relocation --json > "$work/results/cpu-default.json" ||
        return 1
      "$spanc" run "$work/equality.span" -m "$model" --device=cuda \
        --relocation=$relocation --json > "$work/results/gpu.json" || return 1
      local verdict
      verdict=$(python3 - "$work/results/cpu.json" "$work/results/gpu.json" \
                  "$work/results/cpu-default.json" <<'PY'
import json, sys
reference, gpu, default = (json.load(open(p)) for p in sys.argv[1:4])
def tokens(result):
    return {c["query"]: c["tokens"] for c in result["runs"][-1]["calls"]}
def departures(a, b):
    """Per query: the first token where b leaves a (None: never)."""
    return {q: next((i for i, (x, y) in enumerate(zip(a[q], b[q])) if x != y),
                    None if len(a[q]) == len(b[q]) else min(len(a[q]), len(b[q])))
            for q in a}
ref = tokens(reference)
gpu_at, cpu_at = departures(ref, tokens(gpu)), departures(ref, tokens(default))
same = sum(at is None for at in gpu_at.values())
words, ok = [f"{same}/{len(ref)} equal"], True
for q, at in gpu_at.items():
    if at is None:
        continue
    cpu = cpu_at[q]
    if cpu is not None and cpu <= at:
        words.append(f"{q}: at token {at}, a near tie (the CPU's bf16 path "
                     f"leaves the f32 reference at token {cpu})")
    else:
        ok = False
        words.append(f"{q}: DIFFERS at token {at} (the CPU's bf16 path "
                     + ("agrees" if cpu is None else f"leaves at token {cpu}") + ")")
print("; ".join(words))
sys.exit(0 if ok else 3)
PY
) || ok=1
      echo "$(basename "$model") $relocation: $verdict"
      equality_rows+="| $(basename "$model") | $relocation | $verdict |\n"
    done
  done
  echo -e "$equality_rows" > "$work/results/equality.md"
  return $ok
}
# GPU_SH_QUICK=1: the tests and the 8B-shape prefill with its op profile
# only (a run that must fit one short call); the answers, SmolLM2 and the
# RAG runs are skipped.
quick=${GPU_SH_QUICK:-}
[[ -z $quick ]] && step "GPU answers = CPU answers (temperature 0)" 60 equality

# --- 3b. SmolLM2 on the GPU: the README's query, a RAG hit, accuracy. -----
# Only where the model came (see the top): the real model's answer on both
# devices, its span hit against stock prefix caching, and the accuracy
# grid's codes32 row on the GPU beside the CPU's published counts.
smol_answers() {
  cd "$root"
  local device
  for device in cpu cuda; do
    "$spanc" run examples/rag.span -m "$smol" --device=$device --repeat 2 \
      --json > "$work/results/smol-$device.json" || return 1
  done
  python3 - "$work/results/smol-cpu.json" "$work/results/smol-cuda.json" \
      > "$work/results/smol-answers.md" <<'PY'
import json, sys
rows, same = [], True
results = [json.load(open(p)) for p in sys.argv[1:3]]
texts = []
for device, result in zip(("cpu", "cuda"), results):
    for index, run in enumerate(result["runs"]):
        call = run["calls"][0]
        text = run["queries"][0]["results"][0]["text"]
        texts.append(text)
        rows.append(f"| {device} | {'cold' if index == 0 else 'warm'} | {text} "
                    f"| {call['reused_tokens']} / {call['prompt_tokens']} "
                    f"| {call['ttft_seconds'] * 1e3:.1f} |")
print("\n".join(rows))
print()
print("all four answers the same" if len(set(texts)) == 1 else "ANSWERS DIFFER")
PY
  cat "$work/results/smol-answers.md"
}
if [[ -n $smol && -z $quick ]]; then
  step "SmolLM2: examples/rag.span on CPU and GPU" 60 smol_answers
  step "SmolLM2: RAG hit vs stock on the GPU (spanc bench rag)" 90 \
    "$spanc" bench rag --device=cuda -m "$smol" --set docs=1,8,15 \
      --set reps=3 --set peer=off --set modes=none --set budget-s=60 \
      --results "$work/results/smol-rag"
  step "SmolLM2: accuracy, codes32, full vs prefix+end1 on the GPU" 60 \
    "$spanc" bench accuracy --device=cuda -m "$smol" \
      --set modes=full,prefix+end1 --set task=codes --set doc_tokens=32 \
      --set contexts=8 --set budget-s=40 --results "$work/results/smol-accuracy"
fi

# --- 4. The paper's scale: a Llama-3-8B-shape model, made here. -----------
big="$work/llama3-8b-shape-q8_0.gguf"
export big
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
      --set tokens=512,2048,8192 --set moves=64,512,4096 \
      --results "$work/results"
  # The same prefill on the f32 SIMT attention kernel, beside.
  mkdir -p "$work/results/simt"
  step "prefill on the SIMT attention kernel" 60 \
    env SPANC_CUDA_ATTENTION=simt "$spanc" bench device --device=cuda -m "$big" -r 1 \
      --set tokens=512,2048,8192 --set moves=64 \
      --results "$work/results/simt"
  # 1 to 32 documents of 2857 tokens, in two runs so that the small counts'
  # table is written even if the large counts run out of time; budget-s
  # stops starting new counts before a step's timeout.
  rag() {
    local part=$1 docs=$2 budget=$3
    mkdir -p "$work/results/rag-$part"
    "$spanc" bench rag --device=cuda -m "$big" \
      --set docs=$docs --set doc-tokens=2857 --set reps=1 \
      --set peer=off --set modes=none --set cache-tokens=200000 \
      --set step-tokens=2048 --set budget-s=$budget \
      --results "$work/results/rag-$part"
  }
  if [[ -z $quick ]]; then
    step "RAG TTFT, 1-8 documents (spanc bench rag)" 90 rag small 1,2,4,8 60
    step "RAG TTFT, 16 and 32 documents (spanc bench rag)" 200 rag large 16,32 60
  fi
fi

cp "$work/results/device-cuda.tsv" "$out/" 2>/dev/null
cp "$work/results/rag-small/rag.tsv" "$out/rag-small.tsv" 2>/dev/null
cp "$work/results/rag-large/rag.tsv" "$out/rag-large.tsv" 2>/dev/null
cp "$work/results/smol-rag/rag.tsv" "$out/smol-rag.tsv" 2>/dev/null
cp "$work/results/smol-accuracy/accuracy.tsv" "$out/smol-accuracy.tsv" 2>/dev/null
write_report
cat "$out/gpu.md"

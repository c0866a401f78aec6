#!/usr/bin/env bash
# RL against the SFT model it starts from, over several training seeds: the paper's central claim, measured.
#
# Starts one reward service on the workspace, trains ALGO from the SFT model once per seed (JOBS at a time),
# stops the service (chDB opens a workspace in one process at a time), evaluates every run greedily on SPLIT of
# both domains, and compares them with the SFT planner: each seed paired on the queries (a CI over queries),
# and the seeds pooled (`prore eval compare --pool`, a CI over seeds and queries). With FILTER=1 the first
# seed samples the prompt filter and the others reuse it.
#
#   PRORE_WORKSPACE=W bash scripts/rl_vs_sft.sh                          # DAPO, seeds 0 1 2, from W/runs/sft-both
#   OFFSET=5714 LIMIT=1900 NAME=dapo-unseen bash scripts/rl_vs_sft.sh    # on requests the SFT run never saw
#
# Environment (defaults in brackets):
#   SFT [W/runs/sft-both/final]  the SFT model; it is evaluated on SPLIT first unless it already was
#   ALGO [dapo]  grpo or dapo            NAME [ALGO]  runs go to W/runs/NAME-s<seed>
#   SEEDS ["0 1 2"]   STEPS [100]   LR [5e-5]   ITERATIONS [2]   LIMIT [2000] requests per domain
#   OFFSET [0]  skip that many training requests per domain first (an SFT run's --limit: requests it never saw)
#   FILTER [1]  --filter-prompts (FILTER_ON [reward] or accuracy)
#   JOBS [2]  trainers at once, one torch thread each when more than one   SPLIT [test]   PORT [8300]
#   DECODE [planner]  the evaluation's decoding: planner (free) or planner-grounded (as `prore serve` decodes)
#   EXTRA  more `prore train` flags (a GPU machine: none needed; the trainer uses CUDA when torch has it)
set -euo pipefail
cd "$(dirname "$0")/.."
PRORE=".venv/bin/prore --config ${DEMO_CONFIG:-scripts/demo.yaml}"
WS="${PRORE_WORKSPACE:-workspace}"
SFT="${SFT:-$WS/runs/sft-both/final}"
ALGO="${ALGO:-dapo}"; NAME="${NAME:-$ALGO}"; SEEDS="${SEEDS:-0 1 2}"; JOBS="${JOBS:-2}"; SPLIT="${SPLIT:-test}"
PORT="${PORT:-8300}"; FILTER="${FILTER:-1}"; DECODE="${DECODE:-planner}"
case "$DECODE" in planner|planner-grounded) ;; *) echo "error rl_vs_sft: DECODE=$DECODE (planner|planner-grounded)" >&2; exit 2 ;; esac
read -ra seeds <<< "$SEEDS"
[ -f "$SFT/planner.json" ] || { echo "error rl_vs_sft: no planner at SFT=$SFT (train one: prore train sft)" >&2; exit 2; }
[ "${#seeds[@]}" -ge 2 ] || echo "note: one seed gives no pooled comparison" >&2
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
base="$DECODE:$(basename "$(dirname "$SFT")")"

for d in ecommerce email; do  # the SFT model's own evaluation, the baseline of every comparison
  if [ -z "$(ls -A "$WS/reports/eval/$d/$SPLIT/$base" 2>/dev/null)" ]; then
    step "evaluate the SFT model on $d ($SPLIT)"
    $PRORE eval "$d" --method "$DECODE:$SFT" --split "$SPLIT" --quiet
  fi
done

step "reward service on port $PORT"
$PRORE reward serve --tokenizer "$SFT" --port "$PORT" > "$WS/runs/reward-$NAME.log" 2>&1 &
svc=$!
trap 'kill $svc 2>/dev/null || true' EXIT
for _ in $(seq 150); do curl -sf "http://127.0.0.1:$PORT/readyz" > /dev/null && break; kill -0 $svc || break; sleep 2; done
curl -sf "http://127.0.0.1:$PORT/readyz" > /dev/null || { echo "error rl_vs_sft: the reward service did not start; see $WS/runs/reward-$NAME.log" >&2; exit 1; }

flags=(--domain ecommerce --domain email --init "$SFT" --reward-url "http://127.0.0.1:$PORT" --max-steps "${STEPS:-100}"
       --num-iterations "${ITERATIONS:-2}" --lr "${LR:-5e-5}" --limit "${LIMIT:-2000}" --offset "${OFFSET:-0}")
if [ "$FILTER" = 1 ]; then flags+=(--filter-prompts --filter-on "${FILTER_ON:-reward}"); fi
read -ra extra <<< "${EXTRA:-}"
threads=()
if [ "$JOBS" -gt 1 ]; then threads=(env PRORE_TRAIN_THREADS=1); fi
train() {  # seed
  local out="$WS/runs/$NAME-s$1"
  "${threads[@]}" $PRORE train "$ALGO" "${flags[@]}" "${extra[@]}" --seed "$1" --out "$out" > "$out.log" 2>&1 \
    || { echo "error rl_vs_sft: seed $1 failed; the end of $out.log:" >&2; tail -n 5 "$out.log" >&2; return 1; }
  echo "seed $1: $(grep -oE '"(steps|prompts|wall_s|s_per_step|reward_last10)": [0-9.]+' "$out/summary.json" | tr '\n' ' ')"
}
step "train $ALGO from $SFT, seeds ${seeds[*]}, $JOBS at a time (logs: $WS/runs/$NAME-s<seed>.log)"
pids=()
for i in "${!seeds[@]}"; do
  s="${seeds[$i]}"
  if [ "$i" -gt 0 ] && [ "$FILTER" = 1 ]; then  # the first seed's filter, once it is recorded, for the others
    first="$WS/runs/$NAME-s${seeds[0]}/prompt_filter.json"
    while [ ! -f "$first" ]; do kill -0 "${pids[0]}" 2>/dev/null || break; sleep 5; done
    mkdir -p "$WS/runs/$NAME-s$s"; cp "$first" "$WS/runs/$NAME-s$s/" 2>/dev/null || true
  fi
  while [ "$(jobs -rp | grep -vc "^$svc$")" -ge "$JOBS" ]; do sleep 5; done
  train "$s" & pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=1; done
kill $svc; wait $svc 2>/dev/null || true
[ "$failed" = 0 ] || exit 1

members=()
for s in "${seeds[@]}"; do members+=("$DECODE:$NAME-s$s"); done
pool=$(IFS=,; echo "${members[*]}")
for d in ecommerce email; do
  step "evaluate $d ($SPLIT): every seed, then against $base"
  for s in "${seeds[@]}"; do $PRORE eval "$d" --method "$DECODE:$WS/runs/$NAME-s$s/final" --split "$SPLIT" --quiet; done
  runs=("$WS/reports/eval/$d/$SPLIT/$base")
  for m in "${members[@]}"; do runs+=("$WS/reports/eval/$d/$SPLIT/$m"); done
  pooled=(); [ "${#seeds[@]}" -ge 2 ] && pooled=(--pool "$NAME=$pool")
  $PRORE eval compare "${runs[@]}" --baseline "$base" "${pooled[@]}"
done

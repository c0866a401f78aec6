#!/usr/bin/env bash
# The training part of `make demo`: on each domain, train a small planner by SFT for a few minutes, run a
# short GRPO on it, evaluate both next to the baselines on the test split and print the comparison.
# Expects the corpora, indexes, benchmarks and baseline runs that scripts/demo.sh makes first.
# PROFILE=demo (default): the 5M-parameter model, a few hundred SFT steps and 20 GRPO steps per domain.
# PROFILE=paper: the defaults file's full recipe (3 SFT epochs, 200 GRPO and 200 DAPO steps); hours on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
PRORE=".venv/bin/prore --config ${DEMO_CONFIG:-scripts/demo.yaml}"
PROFILE="${PROFILE:-demo}"
WS="${PRORE_WORKSPACE:-workspace}"
case "$PROFILE" in
  demo)  SFT=(--max-steps 250 --eval-steps 50); RL=(--max-steps 20 --save-steps 10); LIMIT=(--limit 200); ALGOS="grpo" ;;
  paper) SFT=(); RL=(); LIMIT=(); ALGOS="grpo dapo" ;;
  *) echo "error profile: unknown PROFILE=$PROFILE (demo|paper)" >&2; exit 2 ;;
esac

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

for d in ecommerce email; do
  RUNS="$WS/runs"
  step "train $d: SFT ($PROFILE)"
  $PRORE train sft --domain "$d" "${SFT[@]}" --out "$RUNS/sft-$d"
  for a in $ALGOS; do
    step "train $d: ${a^^} from the SFT model"
    $PRORE train "$a" --domain "$d" --init "$RUNS/sft-$d/final" "${RL[@]}" "${LIMIT[@]}" --out "$RUNS/$a-$d"
  done
  $PRORE train plot "$RUNS/sft-$d" "$RUNS"/{grpo,dapo}-"$d" --out "$RUNS/curves-$d.png"
  step "evaluate $d: the planners next to the baselines (test split)"
  for run in sft $ALGOS; do
    $PRORE eval "$d" --method "planner:$RUNS/$run-$d/final" --split test --quiet
  done
  $PRORE eval compare --domain "$d" --split test
done
echo
echo "Training runs (metrics.jsonl, TensorBoard events, curves-*.png) are under $WS/runs/."

#!/usr/bin/env bash
# verl's GRPO recipe on CPU from a local SFT planner, next to the local (TRL) GRPO at equal steps.
#
#   bash scripts/verl_cpu.sh [SFT_DIR]      (default: the planner `make demo` trains, workspace/runs/sft-both/final)
#
# 1. `prore train export` builds verl's parquet with the SFT planner's own prompt (its card: --planner).
# 2. `prore reward serve` scores the rollouts, as in the cluster.
# 3. `prore train launch grpo --cpu` runs verl's main_ppo (in .venv-verl) for RESUME_AT steps, stops with a
#    checkpoint, and is launched again up to STEPS: verl resumes from that checkpoint (trainer.resume_mode=auto).
# 4. `prore train from-verl` turns the last checkpoint into a planner directory.
# 5. `prore train grpo` runs the same recipe under TRL for STEPS steps (batch, group, lr and response length alike).
# 6. `prore train plot` draws both runs' curves (reward, loss, KL, response length) into OUT/curves.png, and
#    both planners are evaluated under grounded decoding on LIMIT test requests (EVAL=0 skips it).
#
# STEPS (20), RESUME_AT (10), DOMAIN (ecommerce), PROMPTS (8 a step), GROUP (4), LR (1e-5), OUT
# (workspace/runs/verl-cpu), REWARD_PORT (8311), LIMIT (150). About 15-25 minutes on 2 cores.
# POOL (0: every training prompt): both trainers draw from the first POOL training prompts only, so that in
# 20 steps each prompt comes back several times and a rising reward can show (verl's data.train_max_samples,
# unshuffled; TRL's --limit).
set -euo pipefail
cd "$(dirname "$0")/.."
WS="${PRORE_WORKSPACE:-workspace}"
SFT="${1:-$WS/runs/sft-both/final}"
OUT="${OUT:-$WS/runs/verl-cpu}"
STEPS="${STEPS:-20}"; RESUME_AT="${RESUME_AT:-10}"; DOMAIN="${DOMAIN:-ecommerce}"
PROMPTS="${PROMPTS:-8}"; GROUP="${GROUP:-4}"; LR="${LR:-1e-5}"; PORT="${REWARD_PORT:-8311}"; LIMIT="${LIMIT:-150}"
POOL="${POOL:-0}"
VERL_POOL=(); TRL_POOL=()
if [ "$POOL" -gt 0 ]; then
  # verl stops at the end of its epochs whatever total_training_steps says: enough epochs of the pool for STEPS.
  VERL_POOL=(--set "data.train_max_samples=$POOL" --set data.shuffle=false
             --set "trainer.total_epochs=$(( (STEPS * PROMPTS + POOL - 1) / POOL ))"); TRL_POOL=(--limit "$POOL")
fi
PRORE=".venv/bin/prore --config ${DEMO_CONFIG:-scripts/demo.yaml}"
VERL_PY=.venv-verl/bin/python

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
test -f "$SFT/planner.json" || { echo "error no_planner: $SFT is not a planner directory (run make demo first)" >&2; exit 2; }
test -x "$VERL_PY" || bash scripts/verl-env.sh
rm -rf "$OUT"; mkdir -p "$OUT/verl-grpo"

step "1/6 verl's data with the SFT planner's prompt"
$PRORE train export "$DOMAIN" --planner "$SFT"

step "2/6 the reward service on 127.0.0.1:$PORT"
$PRORE reward serve --domain "$DOMAIN" --port "$PORT" --log-level warning > "$OUT/reward.log" 2>&1 &
SERVICE=$!
trap 'kill $SERVICE 2>/dev/null || true' EXIT
for _ in $(seq 120); do
  curl -sf "http://127.0.0.1:$PORT/healthz" > /dev/null && break
  kill -0 $SERVICE 2>/dev/null || { cat "$OUT/reward.log" >&2; exit 1; }
  sleep 1
done

# The verl recipe's GRPO at the local trainer's sizes: PROMPTS x GROUP rollouts a step, one update per batch.
RECIPE=(--set "data.train_batch_size=$PROMPTS" --set "actor_rollout_ref.rollout.n=$GROUP"
        --set "actor_rollout_ref.actor.ppo_mini_batch_size=$PROMPTS" --set "actor_rollout_ref.actor.optim.lr=$LR"
        --set data.max_prompt_length=1024 --set data.max_response_length=128
        --set trainer.val_before_train=false --set trainer.test_freq=-1 --set "trainer.save_freq=$RESUME_AT"
        --set "trainer.logger=[console,file]" --set "hydra.run.dir=$OUT/hydra"
        --set "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]" "${VERL_POOL[@]}")
launch() {  # $1: the last step; verl's file logger writes a new file per launch, joined afterwards
  VERL_FILE_LOGGER_PATH="$OUT/verl-grpo/metrics-to-$1.jsonl" .venv-verl/bin/prore --config "${DEMO_CONFIG:-scripts/demo.yaml}" \
    train launch grpo --cpu --python "$VERL_PY" --domain "$DOMAIN" --model "$SFT" --gpus-per-node 1 --micro-batch 8 \
    --reward-url "http://127.0.0.1:$PORT" --checkpoint-dir "$OUT/ckpt" --experiment grpo "${RECIPE[@]}" \
    --set "trainer.total_training_steps=$1" 2>&1 | tee -a "$OUT/verl.log" | grep --line-buffered -E "step:[0-9]+ -|Error|error" | cut -c1-400
}
step "3/6 verl main_ppo on CPU: steps 1-$RESUME_AT, then resumed from its checkpoint to $STEPS"
launch "$RESUME_AT"
launch "$STEPS"
cat "$OUT/verl-grpo/metrics-to-$RESUME_AT.jsonl" "$OUT/verl-grpo/metrics-to-$STEPS.jsonl" > "$OUT/verl-grpo/metrics.jsonl"
kill $SERVICE; wait $SERVICE 2>/dev/null || true

step "4/6 the last checkpoint as a planner"
$PRORE train from-verl "$OUT/ckpt/grpo" --init "$SFT" --out "$OUT/verl-grpo/final"

step "5/6 the same GRPO under TRL, $STEPS steps"
$PRORE train grpo --domain "$DOMAIN" --init "$SFT" --max-steps "$STEPS" --lr "$LR" --prompts-per-step "$PROMPTS" \
  --num-generations "$GROUP" --max-completion-length 128 --save-steps "$STEPS" --out "$OUT/trl-grpo" "${TRL_POOL[@]}"

step "6/6 curves and a grounded evaluation of both"
$PRORE train plot "$OUT/verl-grpo" "$OUT/trl-grpo" --out "$OUT/curves.png"
if [ "${EVAL:-1}" = 1 ]; then
  for run in verl-grpo trl-grpo; do
    $PRORE eval "$DOMAIN" --method "planner-grounded:$OUT/$run/final" --split test --limit "$LIMIT" --quiet
  done
  $PRORE eval "$DOMAIN" --method "planner-grounded:$SFT" --split test --limit "$LIMIT" --quiet
fi
echo "curves: $OUT/curves.png; verl's log: $OUT/verl.log"

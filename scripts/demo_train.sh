#!/usr/bin/env bash
# The training part of `make demo`: train a small planner by SFT for a few minutes, run a short GRPO on it,
# evaluate both next to the baselines on each domain's test split and print the comparisons.
# Expects the corpora, indexes, benchmarks and baseline runs that scripts/demo.sh makes first.
# PROFILE=demo (default): one 1.5M-parameter planner (size t) for both corpora (as `prore serve` serves one
#   planner for every domain; the prompt carries the corpus schema), 1,800 SFT steps at lr 5e-3 and 10 GRPO
#   steps: the recipe that learned most per minute in the quick-demo ablation (README). Only the SFT planner is
#   evaluated, and only under grounded decoding: each evaluation pays about 45 s of vLLM start-up, and the
#   free-decoding rows and the 10-step GRPO's (the same numbers as SFT's) would take the demo past 15 minutes.
# PROFILE=medium: one planner for both corpora trained on the medium splits, SFT_STEPS (default 3000) SFT steps,
#   then RL_STEPS (default 50) GRPO and as many DAPO steps from it; all three evaluated on test and OOD.
# FREE (medium and paper: 1; demo: 0) evaluates every run with free decoding (`planner:PATH`).
# GUIDED_SAMPLES (medium and paper: 8; demo: 0, off) also evaluates the SFT planner with execution-guided
#   decoding (`planner:PATH?samples=N`); GRAMMAR (medium and paper: 1; demo: 0) also evaluates it under the
#   program grammar (`planner-grammar:PATH`, README: Local training). GROUNDED (every profile: 1) also evaluates
#   it under the grounded grammar (`planner-grounded:PATH`: phrases copied from the request, values from the
#   corpus), the decoding `prore serve` uses by default. FILTER (medium and paper: 1; demo: 0)
#   trains DAPO only on prompts whose samples from the SFT model earn differing rewards (`--filter-prompts`).
# SERVED (demo: 1; medium and paper: 0) evaluates the grounded row through vLLM's server, started once with README
#   "Serving"'s command (scripts/planner_server.sh), as `prore serve` asks it (`planner-served:PATH?url=URL`): both
#   domains and the query API of scripts/demo_serve.sh share one model start (KEEP_PLANNER_SERVER=1, which
#   scripts/demo.sh sets, leaves it running for that step). SERVED=0 evaluates offline (`planner-grounded:PATH`).
# BESIDE_SFT (scripts/demo.sh sets it to step 6's baselines) is a command run beside the first SFT, which keeps about
#   1.4 of 2 cores busy and opens no index; its output is printed when the SFT ends (about 20 s sooner in all).
# PROFILE=paper: one planner per domain with the defaults file's full recipe (3 SFT epochs, 200 GRPO and
#   200 DAPO steps); hours on 2 cores.
# ARCH (medium: minilm-seq2seq; demo and paper: decoder) picks the planner. minilm-seq2seq is the best planner
#   measured (README: Training the planner): MiniLM's frozen encoder with a small decoder, SFT_STEPS (default
#   6000) steps, then DAPO from it on the prompt filter's share of the first RL_LIMIT (default 500) requests per domain
#   (RL_STEPS, default 150, at lr 5e-5); both evaluated under the grounded grammar (`seq2seq-grounded:`, the
#   decoding prore serve uses) on test, OOD and the human split, and the DAPO planner once more as the best system
#   measured: its program and GUIDED_SAMPLES samples fused with self-query unless the request is worded like the
#   training requests (the familiarity gate `prore train familiarity` gives the SFT planner, which DAPO carries),
#   the rrf fallback answering a request none of whose programs runs
#   (`?samples=N&fuse=self-query&gate=familiar&fallback=rrf`, what `prore serve --fuse self-query --fuse-gate
#   familiar --guided-samples N` does). It serves through its own model server
#   (README: The encoder-decoder planner), not vLLM. ARCH=decoder keeps the decoder-only recipe below.
set -euo pipefail
cd "$(dirname "$0")/.."
PRORE=".venv/bin/prore --config ${DEMO_CONFIG:-scripts/demo.yaml}"
PROFILE="${PROFILE:-demo}"
WS="${PRORE_WORKSPACE:-workspace}"
RUNS="$WS/runs"
# Each training set is name:domains.
case "$PROFILE" in
  demo)   SFT=(--size t --lr 5e-3 --max-steps 1800 --eval-steps 360); RL=(--max-steps 10 --save-steps 5); LIMIT=(--limit 100); ALGOS="grpo"
          SETS=("both:ecommerce email"); SPLITS="test"; GUIDED="${GUIDED_SAMPLES:-0}"; GRAMMAR="${GRAMMAR:-0}"
          FILTER="${FILTER:-0}"; FREE="${FREE:-0}"; SERVED="${SERVED:-1}" ;;
  medium) SFT=(--max-steps "${SFT_STEPS:-3000}" --eval-steps 500); RL=(--max-steps "${RL_STEPS:-50}" --save-steps 25)
          LIMIT=(); ALGOS="grpo dapo"; SETS=("both:ecommerce email"); SPLITS="test ood"; GUIDED="${GUIDED_SAMPLES:-8}"; GRAMMAR="${GRAMMAR:-1}"
          FILTER="${FILTER:-1}"; FREE="${FREE:-1}"; SERVED="${SERVED:-0}" ;;
  paper)  SFT=(); RL=(); LIMIT=(); ALGOS="grpo dapo"; SETS=("ecommerce:ecommerce" "email:email"); SPLITS="test ood"
          GUIDED="${GUIDED_SAMPLES:-8}"; GRAMMAR="${GRAMMAR:-1}"; FILTER="${FILTER:-1}"; FREE="${FREE:-1}"; SERVED="${SERVED:-0}" ;;
  *) echo "error profile: unknown PROFILE=$PROFILE (demo|medium|paper)" >&2; exit 2 ;;
esac
ARCH="${ARCH:-$([ "$PROFILE" = medium ] && echo minilm-seq2seq || echo decoder)}"
case "$ARCH" in
  decoder) ;;
  minilm-seq2seq)
    SFT=(--arch minilm-seq2seq --max-steps "${SFT_STEPS:-6000}" --eval-steps 1000)
    RL=(--max-steps "${RL_STEPS:-150}" --lr 5e-5 --save-steps 50); LIMIT=(--limit "${RL_LIMIT:-500}"); ALGOS="dapo"
    FILTER="${FILTER:-1}"; SPLITS="$SPLITS human" ;;
  *) echo "error arch: unknown ARCH=$ARCH (decoder|minilm-seq2seq)" >&2; exit 2 ;;
esac

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# shellcheck source=scripts/planner_server.sh
source scripts/planner_server.sh
# However this script ends (done, failed, Ctrl-C or SIGTERM), the command beside the SFT stops with every process it
# started (it leads a session of its own), and so does the planner's server (SERVED=1), unless the caller serves
# with it next.
beside=""
cleanup() {
  if [[ -n "$beside" ]] && kill -0 "$beside" 2>/dev/null; then
    kill -- "-$beside" 2>/dev/null || true
    wait "$beside" 2>/dev/null || true
  fi
  if [[ "${KEEP_PLANNER_SERVER:-0}" != 1 ]]; then planner_server_stop; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for set in "${SETS[@]}"; do
  name="${set%%:*}"
  read -ra domains <<< "${set#*:}"
  on=()
  for d in "${domains[@]}"; do on+=(--domain "$d"); done
  step "train $name: SFT on ${domains[*]} ($PROFILE)"
  if [[ -n "${BESIDE_SFT:-}" ]]; then  # a command run beside the first SFT (scripts/demo.sh: step 6's baselines)
    mkdir -p "$RUNS"
    setsid bash -c "$BESIDE_SFT" > "$RUNS/beside-sft.log" 2>&1 &
    beside=$!
  fi
  $PRORE train sft "${on[@]}" "${SFT[@]}" --out "$RUNS/sft-$name"
  if [[ -n "$beside" ]]; then
    step "beside the SFT: $BESIDE_SFT"
    rc=0; wait "$beside" || rc=$?
    beside=""
    cat "$RUNS/beside-sft.log"
    if [ "$rc" != 0 ]; then echo "error demo: '$BESIDE_SFT' beside the SFT failed (exit $rc)" >&2; exit 1; fi
    BESIDE_SFT=""
  fi
  if [ "$ARCH" = decoder ] && [ "${GROUNDED:-1}" = 1 ] && [ "$SERVED" = 1 ]; then
    planner_server_launch "$RUNS/sft-$name/final"  # vLLM loads the SFT planner while RL trains (no chDB: no clash)
  fi
  if [ "$ARCH" = minilm-seq2seq ]; then  # the fusion gate's training requests; RL runs carry it (README: Serving)
    $PRORE train familiarity "$RUNS/sft-$name/final"
  fi
  for a in $ALGOS; do
    step "train $name: ${a^^} from the SFT model"
    filter=()  # DAPO's dynamic sampling, once against the SFT model (README: Local training, prompt filter)
    if [ "$a" = dapo ] && [ "$FILTER" = 1 ]; then filter=(--filter-prompts); fi
    $PRORE train "$a" "${on[@]}" --init "$RUNS/sft-$name/final" "${RL[@]}" "${LIMIT[@]}" "${filter[@]}" --out "$RUNS/$a-$name"
  done
  $PRORE train plot "$RUNS/sft-$name" $(for a in $ALGOS; do echo "$RUNS/$a-$name"; done) --out "$RUNS/curves-$name.png"
  for d in "${domains[@]}"; do
    for split in $SPLITS; do
      step "evaluate $d: the planners next to the baselines ($split split)"
      if [ "$ARCH" = minilm-seq2seq ]; then  # the grounded grammar, as prore serve decodes
        if [ "$split" = human ]; then  # the baselines beside them (demo.sh runs them on test and OOD)
          for m in bm25 self-query; do $PRORE eval "$d" --method "$m" --split human --quiet; done
        fi
        for run in sft $ALGOS; do
          $PRORE eval "$d" --method "seq2seq-grounded:$RUNS/$run-$name/final" --split "$split" --quiet
        done
        if [ "$GUIDED" -gt 0 ]; then  # the best system measured: the programs fused with self-query
          last="${ALGOS##* }"
          $PRORE eval "$d" --method "seq2seq-grounded:$RUNS/$last-$name/final?samples=$GUIDED&fuse=self-query&gate=familiar&fallback=rrf" \
            --split "$split" --quiet
        fi
        $PRORE eval compare --domain "$d" --split "$split"
        continue
      fi
      if [ "$FREE" = 1 ]; then  # free decoding of every run
        for run in sft $ALGOS; do
          $PRORE eval "$d" --method "planner:$RUNS/$run-$name/final" --split "$split" --quiet
        done
      fi
      if [ "$GUIDED" -gt 0 ]; then  # execution-guided decoding of the SFT planner (README: Local training)
        $PRORE eval "$d" --method "planner:$RUNS/sft-$name/final?samples=$GUIDED" --split "$split" --quiet
      fi
      if [ "$GRAMMAR" = 1 ]; then  # decoding constrained by the program grammar (README: Local training)
        $PRORE eval "$d" --method "planner-grammar:$RUNS/sft-$name/final" --split "$split" --quiet
      fi
      if [ "${GROUNDED:-1}" = 1 ] && [ "$SERVED" = 1 ]; then  # the same decoding, asked as prore serve asks it
        planner_server_start "$RUNS/sft-$name/final"
        $PRORE eval "$d" --method "planner-served:$RUNS/sft-$name/final?url=$PLANNER_URL&model=$PLANNER_MODEL" \
          --split "$split" --quiet
      elif [ "${GROUNDED:-1}" = 1 ]; then  # the grounded grammar, as prore serve decodes (README: Reading requests ...)
        $PRORE eval "$d" --method "planner-grounded:$RUNS/sft-$name/final" --split "$split" --quiet
      fi
      $PRORE eval compare --domain "$d" --split "$split"
    done
  done
done
echo
echo "Training runs (metrics.jsonl, TensorBoard events, curves-*.png) are under $WS/runs/."

#!/usr/bin/env bash
# The demo behind `make demo`: build, index, query and evaluate both corpora on embedded engines.
# PROFILE=demo (default, the quick profile): 1,000 products and 1,000 emails and small benchmarks.
# PROFILE=medium: the demo's corpora with larger splits (6,000 train / 1,000 test / 500 OOD per domain) and
# the baselines on both test and OOD: with scripts/demo_train.sh, the planner report, about 2 hours on 2 cores.
# PROFILE=paper: the paper's corpora (3,000 products, 5,000 emails) and splits (20,000 train / 3,000 test /
# 1,000 OOD per domain), which takes much longer.
set -euo pipefail
cd "$(dirname "$0")/.."
PRORE=".venv/bin/prore --config ${DEMO_CONFIG:-scripts/demo.yaml}"
PROFILE="${PROFILE:-demo}"
case "$PROFILE" in
  demo)   PRODUCTS=1000; EMAILS=1000; TRAIN=3000;  TEST=300;  OOD=150;  SPLITS="test" ;;
  medium) PRODUCTS=1000; EMAILS=1000; TRAIN=6000;  TEST=1000; OOD=500;  SPLITS="test ood" ;;
  paper)  PRODUCTS=3000; EMAILS=5000; TRAIN=20000; TEST=3000; OOD=1000; SPLITS="test ood" ;;
  *) echo "error profile: unknown PROFILE=$PROFILE (demo|medium|paper)" >&2; exit 2 ;;
esac

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# The planner's vLLM server, which step 7 evaluates the planner through and step 8 serves it with, stops when the
# demo ends, whether it finished or failed (scripts/planner_server.sh).
WS="${PRORE_WORKSPACE:-workspace}"
# shellcheck source=scripts/planner_server.sh
source scripts/planner_server.sh
trap planner_server_stop EXIT

step "1/8 corpora ($PRODUCTS products, $EMAILS emails; PROFILE=paper: the paper's 3,000 and 5,000)"
$PRORE corpus build ecommerce --size "$PRODUCTS"
$PRORE corpus build email --size "$EMAILS"

step "2/8 indexes: ClickHouse (chDB) + Milvus Lite + BM25"
$PRORE index build ecommerce
$PRORE index build email

step "3/8 what is indexed"
$PRORE index info
$PRORE corpus show ecommerce --n 2
$PRORE corpus show email --n 1

step "4/8 example programs of each level"
# One process for every example: each corpus's index and MiniLM open once; each program's table follows "--- FILE".
$PRORE execute $(for f in examples/programs/*.json; do echo --program "$f"; done) --k 5

step "5/8 benchmarks with executable gold programs (profile: $PROFILE)"
# Both domains side by side in one process (one thread each; each benchmark as a run of its own writes it).
$PRORE bench synth ecommerce email --train "$TRAIN" --test "$TEST" --ood "$OOD"
for d in ecommerce email; do
  $PRORE bench show "$d" --n 2
done

step "6/8 baselines on the ${SPLITS// / and } split (gold metrics Hit@1..NDCG@3, graded metrics P@1..R@10), then side by side"
if [[ "${DEMO_TRAIN:-1}" != "0" ]]; then
  # Beside step 7's SFT, which leaves part of the second core idle and does not open the index: about 20 s sooner.
  echo "They run beside step 7's SFT (scripts/demo_baselines.sh); their tables are printed when the SFT ends."
else
  SPLITS="$SPLITS" bash scripts/demo_baselines.sh
fi

step "7/8 a small planner trained by SFT, then a short GRPO, evaluated next to the baselines"
if [[ "${DEMO_TRAIN:-1}" != "0" ]]; then
  PROFILE="$PROFILE" KEEP_PLANNER_SERVER=1 BESIDE_SFT="bash scripts/demo_baselines.sh" SPLITS="$SPLITS" \
    bash scripts/demo_train.sh
else
  echo "skipped (DEMO_TRAIN=0)"
fi

step "8/8 the query API and playground on loopback, and one search through it"
bash scripts/demo_serve.sh

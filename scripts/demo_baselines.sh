#!/usr/bin/env bash
# Step 6 of `make demo`: every baseline on each domain's SPLITS (default "test"), then the side-by-side table.
# scripts/demo.sh runs it beside step 7's SFT (which keeps about 1.4 of the 2 cores busy; chDB is free while SFT
# trains), or alone with DEMO_TRAIN=0.
set -euo pipefail
cd "$(dirname "$0")/.."
PRORE=".venv/bin/prore --config ${DEMO_CONFIG:-scripts/demo.yaml}"
METHODS="oracle sql-only bm25 dense rrf self-query"
for d in ecommerce email; do
  for split in ${SPLITS:-test}; do
    # One process for every baseline: the index, the engine and MiniLM open once, one report per method.
    $PRORE eval "$d" $(for m in $METHODS; do echo --method "$m"; done) --split "$split"
    $PRORE eval compare --domain "$d" --split "$split"
  done
done
echo
echo "Hit@1, Hit@3, MRR and NDCG@3: did the method find the gold document (the one the gold program ranks first)?"
echo "P@1, P@5, nDCG@10 and R@10: did it satisfy the request (any document meeting all its conditions counts)?"
echo "Reports (markdown, JSON, PNG charts) are under ${PRORE_WORKSPACE:-workspace}/reports/."

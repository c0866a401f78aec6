#!/usr/bin/env bash
# The end of `make demo`: start `prore serve` on loopback over the demo's indexes, print the URL and a
# curl example, and run one search through it. PLANNER_URL (an OpenAI-compatible base URL up to /v1, such as
# the vLLM server of README "Serving") points it at a served planner; without it the BM25+dense RRF fallback
# answers and says so. PLANNER_MODEL names the served model (default: the one the endpoint lists).
# PLANNER_CARD is the planner's model directory, whose card gives the prompt it was trained with (default:
# scripts/demo_train.sh's SFT run, $WS/runs/sft-both/final, when it exists). SERVE_PORT picks the port
# (default 8080). With SERVE_KEEP=1 the API keeps running until Ctrl-C; otherwise it stops after the search.
set -euo pipefail
cd "$(dirname "$0")/.."
PRORE=".venv/bin/prore --config ${DEMO_CONFIG:-scripts/demo.yaml}"
PORT="${SERVE_PORT:-8080}"
URL="http://127.0.0.1:${PORT}"
ARGS=(serve --host 127.0.0.1 --port "$PORT")
if [[ -n "${PLANNER_URL:-}" ]]; then
  ARGS+=(--planner-url "$PLANNER_URL")
  if [[ -n "${PLANNER_MODEL:-}" ]]; then ARGS+=(--planner-model "$PLANNER_MODEL"); fi
  CARD="${PLANNER_CARD:-${PRORE_WORKSPACE:-workspace}/runs/sft-both/final}"
  if [[ -n "${PLANNER_CARD:-}" || -d "$CARD" ]]; then ARGS+=(--planner-card "$CARD"); fi
fi

$PRORE "${ARGS[@]}" &
PID=$!
trap 'kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true' EXIT

for _ in $(seq 1 240); do
  if curl -fs "$URL/healthz" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$PID" 2>/dev/null; then echo "error serve: prore serve exited" >&2; exit 1; fi
  sleep 0.5
done
curl -fs "$URL/healthz" >/dev/null || { echo "error serve: no answer on $URL" >&2; exit 1; }

BODY='{"query": "wireless headphones under $200 with great noise cancelling", "domain": "ecommerce", "k": 5}'
echo
echo "Query API and playground: $URL/   (OpenAPI: $URL/openapi.json, metrics: $URL/metrics)"
echo "Try it:"
echo "  curl -s $URL/v1/search -H 'Content-Type: application/json' -d '$BODY'"
echo
curl -fs "$URL/v1/search" -H 'Content-Type: application/json' -d "$BODY" | .venv/bin/python -c '
import json, sys
r = json.load(sys.stdin)
src = r["source"] + (f" ({r['"'"'fallback'"'"']['"'"'reason'"'"']})" if r["fallback"] else "")
print(f"answered by: {src}")
print("program:", json.dumps(r["program"]))
for x in r["results"]:
    f = x["fields"]
    print(f"  {x['"'"'rank'"'"']}. {x['"'"'id'"'"']}  {f.get('"'"'title'"'"', '"'"''"'"')}  {f.get('"'"'price'"'"', '"'"''"'"')}")
print("timings (ms):", ", ".join(f"{k} {v:.1f}" for k, v in r["timings"].items()))
'
if [[ "${SERVE_KEEP:-0}" == "1" ]]; then
  echo "Serving on $URL/ until Ctrl-C."
  wait "$PID"
fi

#!/usr/bin/env bash
# The end of `make demo`: serve the trained planner and the query API over the demo's indexes, print the URL
# and a curl example, and run one search through it.
# - The planner: when `scripts/demo_train.sh` trained one (PLANNER_CARD, default $WS/runs/sft-both/final) and no
#   PLANNER_URL is given, vLLM's CPU server serves it with README "Serving"'s own command (shell 1, on
#   VLLM_PORT, default 8000; its log in $WS/runs/vllm-serve.log; scripts/planner_server.sh, which reuses the
#   server `make demo` evaluated the planner through), and `prore serve` asks it with the card's prompt: the
#   search is answered by the planner. DEMO_PLANNER=0 skips it (the BM25+dense fallback answers and the response
#   says so). PLANNER_URL (an OpenAI-compatible base URL up to /v1) points at a planner served elsewhere;
#   PLANNER_MODEL names its model (default: the one the endpoint lists).
# - SERVE_PORT picks the query API's port (default 8080). With SERVE_KEEP=1 both keep running until Ctrl-C;
#   otherwise they stop after the search.
set -euo pipefail
cd "$(dirname "$0")/.."
PRORE=".venv/bin/prore --config ${DEMO_CONFIG:-scripts/demo.yaml}"
PORT="${SERVE_PORT:-8080}"
URL="http://127.0.0.1:${PORT}"
WS="${PRORE_WORKSPACE:-workspace}"
CARD="${PLANNER_CARD:-$WS/runs/sft-both/final}"
# shellcheck source=scripts/planner_server.sh
source scripts/planner_server.sh
PIDS=()
STARTED=0
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
      if [[ "$STARTED" == 1 ]]; then planner_server_stop; fi' EXIT

if [[ -z "${PLANNER_URL:-}" && "${DEMO_PLANNER:-1}" == 1 && -f "$CARD/planner.json" ]]; then
  STARTED=1
  planner_server_start "$CARD"
fi

ARGS=(serve --host 127.0.0.1 --port "$PORT")
if [[ -n "${PLANNER_URL:-}" ]]; then
  ARGS+=(--planner-url "$PLANNER_URL")
  if [[ -n "${PLANNER_MODEL:-}" ]]; then ARGS+=(--planner-model "$PLANNER_MODEL"); fi
  if [[ -n "${PLANNER_CARD:-}" || -d "$CARD" ]]; then ARGS+=(--planner-card "$CARD"); fi
fi

$PRORE "${ARGS[@]}" &
PID=$!
PIDS=("$PID" "${PIDS[@]}")

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
if r["fallback"] and r.get("planner_program"):
    print("the planner wrote:", json.dumps(r["planner_program"]))
print("program that ran:" if r["fallback"] else "program:", json.dumps(r["program"]))
for x in r["results"]:
    f = x["fields"]
    print(f"  {x['"'"'rank'"'"']}. {x['"'"'id'"'"']}  {f.get('"'"'title'"'"', '"'"''"'"')}  {f.get('"'"'price'"'"', '"'"''"'"')}")
print("timings (ms):", ", ".join(f"{k} {v:.1f}" for k, v in r["timings"].items()))
'
if [[ "${SERVE_KEEP:-0}" == "1" ]]; then
  echo "Serving on $URL/ until Ctrl-C."
  wait "$PID"
fi

#!/usr/bin/env bash
# The end of `make demo`: start `prore serve` on loopback over the demo's indexes, print the URL and a
# curl example, and run one search through it. PLANNER_URL (an OpenAI-compatible base URL up to /v1)
# and PLANNER_MODEL point it at a served planner; without them the BM25+dense RRF fallback answers and
# says so. SERVE_PORT picks the port (default 8080). With SERVE_KEEP=1 the API keeps running until Ctrl-C;
# otherwise it stops after the search.
set -euo pipefail
cd "$(dirname "$0")/.."
PRORE=".venv/bin/prore --config ${DEMO_CONFIG:-scripts/demo.yaml}"
PORT="${SERVE_PORT:-8080}"
URL="http://127.0.0.1:${PORT}"
ARGS=(serve --host 127.0.0.1 --port "$PORT")
if [[ -n "${PLANNER_URL:-}" ]]; then
  ARGS+=(--planner-url "$PLANNER_URL" --planner-model "${PLANNER_MODEL:-planner}")
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

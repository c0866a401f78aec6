# Sourced by scripts/demo_train.sh and scripts/demo_serve.sh: the trained planner served by vLLM's CPU server with
# README "Serving"'s shell 1, started once and shared. `make demo` evaluates its planner through this server
# (`planner-served:`, as `prore serve` asks it) and then serves the query API with it: one model start, not three.
# - planner_server_start CARD: serve the planner at CARD on VLLM_PORT (default 8000), unless a server this helper
#   started already serves CARD there, and wait until it answers; the server's pid and card go to
#   $WS/runs/vllm-serve.pid, its log to $WS/runs/vllm-serve.log. Sets PLANNER_URL (http://127.0.0.1:$VLLM_PORT/v1)
#   and PLANNER_MODEL (planner). It is planner_server_launch CARD (start, do not wait: other work may run while
#   vLLM loads) followed by planner_server_wait.
# - planner_server_stop: stop the server the pid file names (if any) and remove the file.
# Expects WS (the workspace) to be set.
VLLM_PORT="${VLLM_PORT:-8000}"

planner_server_start() {
  planner_server_launch "$1" && planner_server_wait
}

planner_server_launch() {
  local card="$1" pidfile="$WS/runs/vllm-serve.pid" pid="" served=""
  PLANNER_URL="http://127.0.0.1:$VLLM_PORT/v1"
  PLANNER_MODEL="planner"
  if [[ -f "$pidfile" ]]; then read -r pid served < "$pidfile" || true; fi
  if [[ -n "$pid" && "$served" == "$card" ]] && kill -0 "$pid" 2>/dev/null; then
    echo "The planner $card is already served by vLLM on port $VLLM_PORT (pid $pid)."
    return 0
  fi
  planner_server_stop
  echo "Serving the trained planner $card with vLLM on port $VLLM_PORT (README: Serving, shell 1) ..."
  # README "Serving", shell 1, as written there (tests/serving/test_serve_readme.py checks they agree).
  VLLM_CPU_KVCACHE_SPACE=1 .venv/bin/python -m vllm.entrypoints.openai.api_server --model "$card" \
    --served-model-name planner --host 127.0.0.1 --port "$VLLM_PORT" --dtype float32 --enforce-eager \
    --max-model-len 4096 --gpu-memory-utilization 0.1 --structured-outputs-config.backend guidance \
    > "$WS/runs/vllm-serve.log" 2>&1 &
  echo "$! $card" > "$pidfile"
}

planner_server_wait() {
  local pidfile="$WS/runs/vllm-serve.pid" pid="" served=""
  if [[ -f "$pidfile" ]]; then read -r pid served < "$pidfile" || true; fi
  if [[ -z "$pid" ]]; then echo "error serve: no planner server was launched" >&2; return 1; fi
  for _ in $(seq 1 300); do
    if curl -fs "$PLANNER_URL/models" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "error serve: vLLM exited; the end of $WS/runs/vllm-serve.log:" >&2; tail -n 20 "$WS/runs/vllm-serve.log" >&2
      rm -f "$pidfile"; return 1
    fi
    sleep 1
  done
  echo "error serve: vLLM did not answer on port $VLLM_PORT in 300 s; see $WS/runs/vllm-serve.log" >&2
  planner_server_stop
  return 1
}

planner_server_stop() {
  local pidfile="$WS/runs/vllm-serve.pid" pid="" served=""
  if [[ -f "$pidfile" ]]; then
    read -r pid served < "$pidfile" || true
    if [[ -n "$pid" ]]; then
      kill "$pid" 2>/dev/null || true
      # vLLM's server stops its engine core on SIGTERM; wait for it, whichever shell started it
      for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    fi
    rm -f "$pidfile"
  fi
}

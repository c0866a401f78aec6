"""What the tests that run the README's serving steps share: the README's bash blocks, a clean environment
for the processes they start, ``prore`` run as a process, and a corpus's column values read from its files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def readme_commands(heading: str, text: str | None = None) -> list[str]:
    """The commands (continued lines joined, comments dropped) of the one fenced bash block under the README's
    ``heading`` (a ``##`` section up to its first ``###``, or a ``###`` subsection)."""
    text = README.read_text() if text is None else text
    level = "## " if f"\n## {heading}\n" in text else "### "
    section = text.split(f"\n{level}{heading}\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    assert len(blocks) == 1, f"the README's {heading!r} holds one bash block: the steps the test runs"
    lines = [line.strip() for line in blocks[0].replace("\\\n", " ").splitlines()]
    return [" ".join(line.split()) for line in lines if line and not line.startswith("#")]


def substitute(command: str, model_dirs: tuple[str, str], ports: dict[str, tuple[str, int]]) -> str:
    """``command`` with the README's model directory and ports replaced (``(readme's, test's)`` pairs), and nothing
    else.

    >>> substitute("prore serve --port 8080 --planner-card w/final", ("w/final", "/m"), {"api": ("8080", 4321)})
    'prore serve --port 4321 --planner-card /m'
    """
    out = command.replace(*model_dirs)
    for readme, port in ports.values():
        out = re.sub(rf"(?<=[ :]){readme}\b", str(port), out)
    return out


def env() -> dict[str, str]:
    """This process's environment without the project's and vLLM's variables, the virtualenv's scripts first
    on ``PATH`` (the README's ``python`` and ``prore``)."""
    out = {k: v for k, v in os.environ.items() if not k.startswith(("PRORE_", "VLLM_"))}
    out["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{out.get('PATH', '')}"
    return {**out, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}


def prore(root: Path, *args: str, timeout: float = 600) -> None:
    """``prore ARGS`` as a process of its own in ``root`` (chDB lets one process at a time open a workspace)."""
    done = subprocess.run([sys.executable, "-m", "prore", *args], cwd=root, env=env(), capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip
    assert done.returncode == 0, f"prore {' '.join(args)}: {done.stderr[-3000:]}"


def readme_workspace(root: Path) -> Path:
    """``root``, whose ``workspace/`` now holds both corpora indexed (``prore serve`` serves both by default) and
    a small ecommerce benchmark, each made by ``prore`` as the README's steps make them."""
    for domain in ("ecommerce", "email"):
        prore(root, "corpus", "build", domain, "--size", "300")
        prore(root, "index", "build", domain, "--embedder", "hashing")
    prore(root, "bench", "synth", "ecommerce", "--train", "200", "--test", "10", "--ood", "2", "--quiet")
    return root


def corpus_values(workspace: Path, domain: str) -> dict[str, tuple[str, ...]]:
    """The distinct values of ``domain``'s string columns, read from its corpus files (what ``prore serve``
    reads from the index built from them)."""
    import pandas as pd

    from indexing.schema import schema_for
    from serving.dsl.grounding import MAX_VALUES, value_columns

    frame = pd.concat(
        [pd.read_parquet(f) for f in sorted((workspace / "corpora" / domain).glob("v*/part-*.parquet"))]
    )
    out = {}
    for name in value_columns(schema_for(domain)):
        found = tuple(sorted({str(v) for v in frame[name].dropna() if str(v).strip()}))
        if len(found) <= MAX_VALUES:
            out[name] = found
    return out

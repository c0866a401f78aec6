"""``prore k8s render``: what the operator would create for a resource, printed before anything is applied.

    prore k8s render examples/k8s/grpo-ecommerce.yaml [--show-command]

The CLI is the top layer, so it may use the operator's pure functions (``operators.render``); the operator
itself imports nothing of the product (an import-linter contract), which keeps its image small. With
``--show-command`` each RayJob is followed by the verl command its entrypoint's ``prore train launch``
resolves to here, from the same recipes the cluster image runs.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from core.errors import ProReError
from indexing.config import Config
from operators.errors import OperatorError
from operators.render import render_documents, to_yaml


class K8sSpecError(ProReError):
    """A custom resource that the operator would refuse (the message names the field)."""

    code = "k8s_spec"


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    p = Path(path)
    if not p.is_file():
        raise K8sSpecError(f"no such file: {path}", code="k8s_file")
    return p.read_text()


def resolved_command(launch: str, run: Callable[[Sequence[str]], int]) -> str:
    """The verl command ``prore train launch ...`` (one shell line) prints for its arguments here, run by
    ``run``: the CLI's own entry point, which hands itself to :func:`register` (it imports this module)."""
    argv = [*shlex.split(launch)[1:], "--print"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = run(argv)
    if rc != 0:
        raise K8sSpecError(
            f"prore train launch refused the entrypoint: {err.getvalue().strip()}", code="k8s_launch"
        )
    return out.getvalue().strip()


def _render(args: argparse.Namespace, cfg: Config, *, run: Callable[[Sequence[str]], int]) -> int:
    objects: list[dict[str, Any]] = []
    try:
        for path in args.files:
            objects += render_documents(_read(path))
    except OperatorError as exc:
        raise K8sSpecError(exc.message, code=exc.code) from None
    for obj in objects:
        text = to_yaml([obj])
        if args.show_command and obj["kind"] == "RayJob":
            launch = next(s for s in obj["spec"]["entrypoint"].split(" && ") if " train launch " in s)
            text += "".join(f"# {line}\n" for line in ["verl command of the entrypoint's prore train launch:",
                                                         resolved_command(launch, run)])  # fmt: skip
        sys.stdout.write("---\n" + text)
    return 0


def register(sub: Any, run: Callable[[Sequence[str]], int]) -> None:
    """Add ``prore k8s render`` to the ``prore`` parser; ``run`` runs a ``prore`` command line (the CLI's
    :func:`~prore.cli.main`), which ``--show-command`` uses to resolve an entrypoint."""
    p = sub.add_parser("k8s", help="Kubernetes: render what the operator creates for a custom resource",
                       description="Tools for the project's custom resources (RetrievalTrainingJob, PlannerService).")  # fmt: skip
    actions = p.add_subparsers(dest="k8s_action", metavar="{render}", required=True)
    r = actions.add_parser(
        "render",
        help="print the RayJob, PlannerService, InferenceService, ScaledObject and ServiceMonitor of a resource",
        description="Print, as YAML, every object the operator would create for the resources in FILE "
        "(the same pure functions the operator runs), so they can be read before kubectl apply.",
    )
    r.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="YAML file(s) of RetrievalTrainingJob or PlannerService ('-': stdin)",
    )
    r.add_argument(
        "--show-command",
        action="store_true",
        help="after each RayJob, the verl command its prore train launch resolves to",
    )
    r.set_defaults(handler=functools.partial(_render, run=run))

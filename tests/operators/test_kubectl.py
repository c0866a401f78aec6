"""``kubectl apply --dry-run=client`` of the examples, with the machine's kubectl when there is one.

Client-side dry run still asks an API server for discovery. Without a reachable server, the test
falls back to ``kubectl annotate --local --dry-run=client``, which parses the same files offline.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.operators.schemas import REPO

KUBECTL = shutil.which("kubectl")
EXAMPLES = sorted((REPO / "examples" / "k8s").glob("*.yaml"))
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="no kubectl binary on this machine")
_NO_SERVER = ("connection refused", "unable to recognize", "failed to download openapi", "no configuration")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_kubectl_parses_the_example(path: Path) -> None:
    assert KUBECTL is not None
    run = subprocess.run([KUBECTL, "apply", "--dry-run=client", "-f", str(path)], capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    if run.returncode == 0:
        return
    assert any(s in run.stderr.lower() for s in _NO_SERVER), run.stderr
    local = subprocess.run([KUBECTL, "annotate", "--local", "--dry-run=client", "-o", "yaml", "-f", str(path),
                            "proretrieval.io/checked=yes"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert local.returncode == 0, local.stderr
    assert "kind: " in local.stdout

"""The operator's settings: one frozen object, read from the environment its Deployment sets.

Each default is what the chart's operator Deployment passes unless told otherwise
(``charts/proretrieval/values.yaml``, key ``operator``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Annotated, Any

from pydantic import BeforeValidator, TypeAdapter, ValidationError

from operators.errors import SpecError
from operators.schema import message

ENV_PREFIX = "PRORE_OPERATOR_"


def _words(value: Any) -> Any:
    """A tuple's variable holds its items separated by spaces (``python -m serving.kserve``)."""
    return tuple(value.split()) if isinstance(value, str) else value


@dataclass(frozen=True)
class OperatorSettings:
    """Images, node labels and addresses the operator writes into the children it creates."""

    training_image: str = "ghcr.io/proretrieval/proretrieval-train:0.1.0"
    """Image of the Ray head and workers: Ray, verl, vLLM and this project (its ``prore`` command)."""
    transformer_image: str = "ghcr.io/proretrieval/proretrieval-transformer:0.1.0"
    """Image of the planner endpoint's transformer (the project with ``'.[kserve]'``: ``serving.kserve``)."""
    s3_image: str = "amazon/aws-cli:2.27.0"
    """Image of the init container that copies an ``s3://`` base model into each Ray node."""
    gpu_label: str = "nvidia.com/gpu.product"
    """Node label whose value names the GPU (GPU feature discovery sets it); workers select on it."""
    gpu_resource: str = "nvidia.com/gpu"
    """Extended resource name of a GPU (the NVIDIA device plugin's)."""
    prometheus_address: str = "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"
    """Prometheus that KEDA queries for vLLM's queue metric (kube-prometheus-stack's service)."""
    transformer_command: Annotated[tuple[str, ...], BeforeValidator(_words)] = (
        "python",
        "-m",
        "serving.kserve",
    )
    """The transformer's command: the project's ``kserve.Model`` under KServe's ModelServer. KServe appends
    ``--model_name``, ``--predictor_host`` and ``--http_port`` to its arguments, which that parser reads."""
    workspace_claim: str = "proretrieval-workspace"
    """PersistentVolumeClaim of the workspace the transformer serves the indexes of (the chart's
    ``workspace.claimName``)."""
    clickhouse_url: str = ""
    """ClickHouse server URL the transformer queries (its ``--clickhouse_url``; the chart's
    ``stores.clickhouseUrl``). Empty gives no argument: embedded chDB in the workspace, which only one process
    may open, so a cluster whose query API shares the workspace sets it."""
    milvus_uri: str = ""
    """Milvus URI the transformer queries (its ``--milvus_uri``; the chart's ``stores.milvusUri``). Empty gives
    no argument: embedded Milvus Lite in the workspace."""
    credentials_secret: str = ""
    """Secret of the read-only store user (the chart's ``stores.credentials.querySecret``): the transformer
    reads its ``CLICKHOUSE_USER``, ``CLICKHOUSE_PASSWORD``, ``MILVUS_USER``, ``MILVUS_PASSWORD`` and
    ``MILVUS_TOKEN`` keys (each optional) as variables. Empty: no credentials. A PlannerService in another
    namespace needs a Secret of that name there."""
    hf_runtime: str = "kserve-huggingfaceserver"
    """ClusterServingRuntime of the predictor: KServe's Hugging Face server, vLLM backend on GPUs."""
    workspace_mount: str = "/mnt/workspace"
    """Where the workspace volume is mounted on every Ray node and in the transformer."""
    checkpoint_mount: str = "/mnt/checkpoints"
    """Where the checkpoint volume is mounted on every Ray node."""
    model_mount: str = "/mnt/model"
    """Where a ``pvc://`` or ``s3://`` base model appears on every Ray node."""
    status_interval_s: float = 60.0
    """How often a running job's step is read from the Ray dashboard."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OperatorSettings:
        """Settings from ``PRORE_OPERATOR_<FIELD>`` variables (``PRORE_OPERATOR_TRAINING_IMAGE``, ...), each
        read as text by pydantic (``60`` for a number); a bad value is a SpecError naming its variable."""
        env = os.environ if env is None else env
        names = {f.name: ENV_PREFIX + f.name.upper() for f in fields(cls)}
        given = {name: env[var] for name, var in names.items() if var in env}
        try:
            return TypeAdapter(cls).validate_strings(given, strict=True)
        except ValidationError as exc:
            error = exc.errors()[0]
            raise SpecError(message(error, cls), path=names[str(error["loc"][0])]) from None

"""The project's custom resources, defined once: ``RetrievalTrainingJob`` and ``PlannerService``.

Group ``proretrieval.io``, version ``v1alpha1``. Each spec is a frozen dataclass whose fields carry their
documentation and limits (:func:`operators.schema.spec_field`); :mod:`operators.crdgen` turns them into the
CRD YAML under ``charts/proretrieval/crds/``, and the operator reads resources back through the same
classes, validated by pydantic under :data:`operators.schema.SPEC` (:func:`operators.schema.load`).

The training hyperparameters are *not* repeated here: an unset field means the recipe's value, the
paper's (``rl/verl/recipes/defaults.yaml``, read by ``prore train launch`` inside the RayJob). A field set
here becomes one Hydra override of that command.
"""

# spec_field returns a dataclasses.field that carries its schema in the metadata:
# ruff: noqa: RUF009
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import with_config

from operators.schema import SPEC, openapi, spec_field

GROUP = "proretrieval.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

Algorithm = Literal["sft", "grpo", "dapo"]
ALGORITHMS: tuple[str, ...] = ("sft", "grpo", "dapo")

STORAGE_URI = r"^(hf|pvc|s3)://[^/\s]+(/[^\s]*)?$"
PVC_URI = r"^pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?(/[^\s]*)?$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
RTX_4090 = "NVIDIA-GeForce-RTX-4090"
"""The ``nvidia.com/gpu.product`` label GPU feature discovery puts on RTX 4090 nodes."""
PromptProfile = Literal["full", "short", "compact", "request"]
PROMPT_PROFILES: tuple[str, ...] = get_args(PromptProfile)
"""The prompt builder's profiles (serving.prompt.PROFILES; the operator imports no product package)."""
PlannerRuntime = Literal["vllm", "seq2seq"]
PLANNER_RUNTIMES: tuple[str, ...] = get_args(PlannerRuntime)
"""What serves the planner: vLLM (a decoder-only checkpoint) or the project's encoder-decoder model server."""
PlannerOutput = Literal["json", "grammar", "grounded", "free"]
PLANNER_OUTPUTS: tuple[str, ...] = get_args(PlannerOutput)
"""How the transformer constrains the planner's decoding (serving.planner.OUTPUTS)."""
FusePartner = Literal["none", "self-query"]
FUSE_PARTNERS: tuple[str, ...] = get_args(FusePartner)
"""What the transformer fuses the planner's programs with (serving.settings.FUSE_PARTNERS)."""
FuseGate = Literal["none", "unanimous", "familiar"]
FUSE_GATES: tuple[str, ...] = get_args(FuseGate)
"""When a fused search is answered by the planner alone (serving.settings.FUSE_GATES)."""


@with_config(SPEC)
@dataclass(frozen=True)
class DataSpec:
    """Where the training data lives."""

    workspace: str = spec_field(
        "Workspace volume as pvc://CLAIM[/PATH]: the corpus parquet under corpora/<domain>/ and the benchmark "
        "parquet under bench/<domain>/, as `prore corpus build` and `prore bench synth` write them.",
        default="pvc://proretrieval-workspace", pattern=PVC_URI,
    )  # fmt: skip
    export: bool = spec_field(
        "Run `prore train export <domain>` first (writes verl's parquet under train/<domain>/ in the workspace).",
        default=True,
    )


@with_config(SPEC)
@dataclass(frozen=True)
class Hyperparameters:
    """Overrides of the recipe's hyperparameters; unset means the paper's value from the recipe."""

    learning_rate: float | None = spec_field("Learning rate (paper: SFT 5e-5, GRPO/DAPO 1e-6).", default=None,
                                             minimum=0)  # fmt: skip
    batch_size: int | None = spec_field(
        "Prompts per step (paper: SFT 64, GRPO/DAPO 32).", default=None, minimum=1
    )
    epochs: int | None = spec_field("Passes over the training split (paper: SFT 3).", default=None, minimum=1)
    rollouts: int | None = spec_field(
        "GRPO/DAPO: completions per prompt, G (paper: 4).", default=None, minimum=2
    )
    kl_coef: float | None = spec_field(
        "GRPO/DAPO: KL loss coefficient (paper: 0.001).", default=None, minimum=0
    )
    clip_low: float | None = spec_field("GRPO/DAPO: lower clip ratio (paper: GRPO 0.2, DAPO 0.1).", default=None,
                                        minimum=0, maximum=1)  # fmt: skip
    clip_high: float | None = spec_field("GRPO/DAPO: upper clip ratio (paper: GRPO 0.2, DAPO 0.28).",
                                         default=None, minimum=0, maximum=1)  # fmt: skip
    dynamic_sampling: bool = spec_field("DAPO: verl's dynamic sampling (drops groups whose rewards are all "
                                        "equal).", default=False)  # fmt: skip


@with_config(SPEC)
@dataclass(frozen=True)
class Resources:
    """The Ray cluster: a CPU head and one GPU worker group."""

    gpu_type: str = spec_field("Value of the GPU node label the workers select (4090-class nodes by default).",
                               default=RTX_4090, min_length=1)  # fmt: skip
    gpus_per_node: int = spec_field("GPUs per worker node.", default=8, minimum=1, maximum=16)
    nodes: int = spec_field("GPU worker nodes (verl's trainer.nnodes).", default=1, minimum=1, maximum=64)
    worker_cpu: str = spec_field("CPU request and limit of each worker.", default="32")
    worker_memory: str = spec_field("Memory request and limit of each worker.", default="128Gi")
    head_cpu: str = spec_field("CPU request and limit of the head (it runs the driver, no GPU).", default="8")
    head_memory: str = spec_field("Memory request and limit of the head.", default="32Gi")
    shm_size: str = spec_field("Size of /dev/shm on every node (NCCL and vLLM need more than the default).",
                               default="16Gi")  # fmt: skip


@with_config(SPEC)
@dataclass(frozen=True)
class RewardServiceRef:
    """The shared reward service (`prore reward serve`, deployed by the chart)."""

    name: str = spec_field("Service name.", default="proretrieval-reward", pattern=DNS_LABEL)
    namespace: str | None = spec_field("Namespace of the service (default: the job's).", default=None,
                                       pattern=DNS_LABEL)  # fmt: skip
    port: int = spec_field("Service port.", default=8790, minimum=1, maximum=65535)
    url: str | None = spec_field("Full base URL instead of name/namespace/port.", default=None,
                                 pattern=r"^https?://[^\s]+$")  # fmt: skip


@with_config(SPEC)
@dataclass(frozen=True)
class RunPolicy:
    """How long the RayJob may take, and what happens after."""

    active_deadline_seconds: int = spec_field("Deadline of the whole run; KubeRay fails the RayJob past it.",
                                              default=172800, minimum=1)  # fmt: skip
    pre_running_deadline_seconds: int = spec_field(
        "Deadline to reach Running (image pulls, GPU scheduling); a job stuck Initializing fails instead of "
        "waiting forever.", default=1800, minimum=1)  # fmt: skip
    ttl_seconds_after_finished: int = spec_field("Seconds the Ray cluster stays after the job finishes (logs).",
                                                 default=3600, minimum=0)  # fmt: skip
    backoff_limit: int = spec_field("Retries of the whole RayJob, each on a new Ray cluster; verl resumes from "
                                    "the newest checkpoint.", default=1, minimum=0)  # fmt: skip
    submitter_backoff_limit: int = spec_field("Retries of the submitter Job (ray job submit).", default=2,
                                              minimum=0)  # fmt: skip


@with_config(SPEC)
@dataclass(frozen=True)
class Autoscaling:
    """Replica bounds and the queue signal the planner endpoint scales on (a KEDA ScaledObject)."""

    min_replicas: int = spec_field("Fewest predictor replicas.", default=1, minimum=1)
    max_replicas: int = spec_field("Most predictor replicas.", default=4, minimum=1)
    metric: str = spec_field("Prometheus metric of vLLM's queue.", default="vllm:num_requests_waiting",
                             min_length=1)  # fmt: skip
    cpu_utilization: int = spec_field(
        "Average CPU use (percent of the request) that triggers a scale-up of a seq2seq predictor, which "
        "generates on its CPUs and has no queue metric.", default=70, minimum=1, maximum=100)  # fmt: skip
    target: float = spec_field(
        "Waiting requests per replica that trigger a scale-up.", default=8.0, minimum=0
    )
    polling_interval_seconds: int = spec_field("How often KEDA reads the metric.", default=15, minimum=1)
    cooldown_seconds: int = spec_field("Quiet time before scaling back down.", default=300, minimum=0)
    prometheus_address: str | None = spec_field("Prometheus URL KEDA queries (default: the operator's).",
                                                default=None, pattern=r"^https?://[^\s]+$")  # fmt: skip


@with_config(SPEC)
@dataclass(frozen=True)
class Fusion:
    """How the transformer answers beside the planner's program (``prore serve``'s ``--guided-samples``, ``--fuse``
    and ``--fuse-gate``): sampled programs, and fusion with the self-querying retriever."""

    guided_samples: int = spec_field(
        "Sampled programs asked for when the planner's program fails, and under fuse for every search no gate "
        "answers alone (0 is off).", default=0, minimum=0, maximum=16)  # fmt: skip
    fuse: FusePartner = spec_field(
        "What the planner's programs are fused with: self-query (the self-querying retriever, by weighted RRF: the "
        "system measured best on wording the planner was not trained on) or none.", default="none")  # fmt: skip
    gate: FuseGate = spec_field(
        "Under fuse, when the planner answers alone: familiar (a search worded like its training requests whose "
        "program ranks something; needs plannerCard), unanimous (its programs all rank the same) or none.",
        default="none")  # fmt: skip


@with_config(SPEC)
@dataclass(frozen=True)
class Promote:
    """Serve the trained planner when the run succeeds (creates a PlannerService)."""

    name: str | None = spec_field("Name of the PlannerService (default: the job's).", default=None,
                                  pattern=DNS_LABEL)  # fmt: skip
    gpu_type: str | None = spec_field("GPU node label value of the endpoint (default: the training's).",
                                      default=None)  # fmt: skip
    autoscaling: Autoscaling = spec_field("Replica bounds and queue target.", default_factory=Autoscaling)
    transformer: bool = spec_field("Put the project's transformer (NL in, program and results out) in front.",
                                   default=True)  # fmt: skip
    planner_card: bool = spec_field(
        "The run started from a planner the project trained (spec.model holds its planner.json): the checkpoint "
        "becomes a planner directory with that card, its exemplar index and familiarity gate (prore train "
        "from-verl --init), and the PlannerService reads it (plannerCard). RL runs from a pvc:// or s3:// model "
        "only.", default=False)  # fmt: skip
    fusion: Fusion = spec_field("The PlannerService's sampled programs and fusion with the self-querying retriever.",
                                default_factory=Fusion)  # fmt: skip


@with_config(SPEC)
@dataclass(frozen=True)
class RetrievalTrainingJobSpec:
    """Train the planner with verl on a KubeRay Ray cluster, scored by the shared reward service."""

    algorithm: Algorithm = spec_field("Recipe: sft, grpo or dapo (rl/verl/recipes/defaults.yaml).")
    model: str = spec_field("Base model: hf://ORG/NAME, pvc://CLAIM/PATH or s3://BUCKET/PATH.",
                            pattern=STORAGE_URI)  # fmt: skip
    domain: str = spec_field("Benchmark domain (ecommerce or email).", default="ecommerce",
                             pattern=r"^[a-z][a-z0-9_]*$")  # fmt: skip
    data: DataSpec = spec_field("Workspace with the corpus and the benchmark.", default_factory=DataSpec)
    checkpoints: str = spec_field("Checkpoint volume as pvc://CLAIM[/PATH] (ReadWriteMany: every node "
                                  "writes its shards).", default="pvc://proretrieval-checkpoints",
                                  pattern=PVC_URI)  # fmt: skip
    hyperparameters: Hyperparameters = spec_field("Overrides of the paper's hyperparameters.",
                                                  default_factory=Hyperparameters)  # fmt: skip
    overrides: list[str] = spec_field("Further verl (Hydra) overrides KEY=VALUE, appended last.",
                                      default_factory=list)  # fmt: skip
    resources: Resources = spec_field("Cluster shape.", default_factory=Resources)
    reward_service: RewardServiceRef = spec_field("The reward service.", default_factory=RewardServiceRef)
    run: RunPolicy = spec_field("Deadlines, retries and clean-up.", default_factory=RunPolicy)
    image: str | None = spec_field("Training image (Ray, verl and this project); default: the operator's.",
                                   default=None)  # fmt: skip
    promote: Promote | None = spec_field("Serve the result on success.", default=None)


@with_config(SPEC)
@dataclass(frozen=True)
class PlannerServiceSpec:
    """Serve a trained planner: a KServe InferenceService on vLLM, autoscaled on its queue (or, for an
    encoder-decoder planner, the project's model server on CPU nodes, autoscaled on CPU)."""

    model: str = spec_field("Model directory: hf://ORG/NAME, pvc://CLAIM/PATH or s3://BUCKET/PATH.",
                            pattern=STORAGE_URI)  # fmt: skip
    runtime: PlannerRuntime = spec_field(
        "What serves the model: vllm (KServe's Hugging Face server on vLLM, GPU nodes: a decoder-only planner) "
        "or seq2seq (python -m serving.kserve_seq2seq in the transformer's image, CPU nodes: a planner whose "
        "planner.json names arch minilm-seq2seq; it reads promptProfile request and decodes under grammar, "
        "grounded or free).", default="vllm")  # fmt: skip
    served_model_name: str = spec_field("Model name of the OpenAI-compatible API.",
                                        default="proretrieval-planner", pattern=DNS_LABEL)  # fmt: skip
    gpu_type: str = spec_field("GPU node label value of the predictor.", default=RTX_4090, min_length=1)
    gpus: int = spec_field("GPUs per predictor replica.", default=1, minimum=1, maximum=8)
    max_model_len: int = spec_field("vLLM's context length (prompt and program).", default=4096, minimum=256)
    autoscaling: Autoscaling = spec_field("Replica bounds and queue target.", default_factory=Autoscaling)
    transformer: bool = spec_field("Put the project's transformer in front of the predictor.", default=True)
    prompt_profile: PromptProfile = spec_field(
        "Prompt profile the planner was trained with, as its planner.json says; verl runs and pretrained "
        "checkpoints: full.", default="full")  # fmt: skip
    planner_output: PlannerOutput = spec_field(
        "How the transformer constrains the planner's decoding: json (the DSL's JSON schema, for vLLM's default "
        "xgrammar backend), grammar (the program grammar: typed SQL, placeholders matched to entries) or grounded "
        "(the program grammar with search phrases copied from the request and string literals among the corpus's "
        "values), both for vLLM's guidance backend, or free.", default="json")  # fmt: skip
    planner_card: bool = spec_field(
        "The transformer reads the model's planner card (planner.json: its prompt profile, exemplar index and "
        "familiarity gate), the model directory given to it too at /mnt/models by KServe's storage initializer; "
        "promptProfile is then the card's and is not read. For a model the project trained.", default=False)  # fmt: skip
    fusion: Fusion = spec_field("Sampled programs and fusion with the self-querying retriever.",
                                default_factory=Fusion)  # fmt: skip
    transformer_image: str | None = spec_field("Transformer image; default: the operator's.", default=None)
    source_job: str | None = spec_field("RetrievalTrainingJob that produced the model.", default=None)


@with_config(SPEC)
@dataclass(frozen=True)
class Condition:
    """One condition, as Kubernetes conditions are."""

    type: str = spec_field("Condition type.", default="")
    status: Literal["True", "False", "Unknown"] = spec_field("True, False or Unknown.", default="Unknown")
    reason: str = spec_field("CamelCase reason.", default="")
    message: str = spec_field("For a person.", default="")
    last_transition_time: str = spec_field("RFC 3339 time of the last change.", default="")


@with_config(SPEC)
@dataclass(frozen=True)
class TrainingStatus:
    """Mirrors the RayJob."""

    phase: str = spec_field("Pending, Initializing, Running, Retrying, Suspended, Succeeded or Failed.",
                            default="Pending")  # fmt: skip
    step: int | None = spec_field("Newest training step the trainer reported.", default=None)
    ray_job: str | None = spec_field("Name of the RayJob.", default=None)
    job_id: str | None = spec_field("Ray job submission id.", default=None)
    dashboard_url: str | None = spec_field("Ray dashboard.", default=None)
    checkpoint: str | None = spec_field("Where checkpoints are written.", default=None)
    planner_service: str | None = spec_field("PlannerService created on promotion.", default=None)
    reason: str | None = spec_field("Why the run failed (KubeRay's reason).", default=None)
    message: str | None = spec_field("For a person.", default=None)
    observed_generation: int | None = spec_field("Generation last reconciled.", default=None)
    conditions: list[Condition] = spec_field("Created, Running, Succeeded, Failed, Promoted.",
                                             default_factory=list)  # fmt: skip


@with_config(SPEC)
@dataclass(frozen=True)
class PlannerStatus:
    """Mirrors the InferenceService."""

    phase: str = spec_field("Pending, Ready or NotReady.", default="Pending")
    url: str | None = spec_field("Endpoint URL.", default=None)
    inference_service: str | None = spec_field("Name of the InferenceService.", default=None)
    message: str | None = spec_field("For a person.", default=None)
    observed_generation: int | None = spec_field("Generation last reconciled.", default=None)
    conditions: list[Condition] = spec_field("Ready.", default_factory=list)


@dataclass(frozen=True)
class Kind:
    """One custom resource kind and what its CRD shows."""

    kind: str
    plural: str
    short_names: tuple[str, ...]
    spec: type
    status: type
    columns: tuple[tuple[str, str, str], ...]
    """(name, type, JSON path) of ``kubectl get``'s columns."""

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{GROUP}"


TRAINING_JOB = Kind(
    "RetrievalTrainingJob", "retrievaltrainingjobs", ("rtj",), RetrievalTrainingJobSpec, TrainingStatus,
    (("Algorithm", "string", ".spec.algorithm"), ("Phase", "string", ".status.phase"),
     ("Step", "integer", ".status.step"), ("Age", "date", ".metadata.creationTimestamp")),
)  # fmt: skip
PLANNER_SERVICE = Kind(
    "PlannerService", "plannerservices", ("planner",), PlannerServiceSpec, PlannerStatus,
    (("Phase", "string", ".status.phase"), ("URL", "string", ".status.url"),
     ("Age", "date", ".metadata.creationTimestamp")),
)  # fmt: skip
KINDS = (TRAINING_JOB, PLANNER_SERVICE)


def crd(kind: Kind) -> dict[str, Any]:
    """The CustomResourceDefinition of ``kind`` (apiextensions.k8s.io/v1), status as a subresource."""
    schema = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": openapi(kind.spec),
            "status": openapi(kind.status),
        },
        "required": ["spec"],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": kind.crd_name, "labels": {"app.kubernetes.io/part-of": "proretrieval"}},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.kind.lower(),
                "shortNames": list(kind.short_names),
                "categories": ["proretrieval"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": n, "type": t, "jsonPath": p} for n, t, p in kind.columns
                    ],
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }

"""Reconcile, training: a ``RetrievalTrainingJob`` becomes one KubeRay ``RayJob`` (pure function).

The RayJob's entrypoint is ``prore train launch <algorithm> ...`` itself, run on the Ray head. That
command builds verl's command line from the recipes (the paper's hyperparameters) and replaces itself
with it, exactly as on a laptop with ``--print`` left off; the operator passes only what a resource can
change (model, cluster shape, paths, the reward URL and explicit overrides as ``--set``). The operator
therefore imports nothing of the product and copies none of its defaults, and a cluster run and a local
``prore train launch ... --print`` cannot drift apart: both are the same code in the same image.

Entrypoint, in order (``&&``: a failed step fails the job, and KubeRay retries it per ``backoffLimit``):

1. ``prore --workspace W train export DOMAIN`` when ``data.export`` (verl's parquet from the benchmark);
2. ``prore --workspace W train launch ALGORITHM --domain ... --model ... --gpus-per-node G --nodes N
   --data-dir W/train/DOMAIN --checkpoint-dir C --experiment NAME [--reward-url URL] [--set KEY=VALUE]...`` (no reward for SFT);
3. with ``promote``: link ``final`` in the run's checkpoint directory to the newest checkpoint's
   Hugging Face directory (verl's ``latest_checkpointed_iteration.txt`` names its step), the model
   directory the PlannerService serves; with ``promote.plannerCard``, ``prore train from-verl RUN_DIR --init
   MODEL --out RUN_DIR/final --algorithm ALGORITHM`` writes ``final`` instead: that step's model with the card
   of the planner the run started from (prompt profile, exemplar index, familiarity gate), which the
   PlannerService's transformer then reads (``plannerCard``).
"""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from operators.api import Fusion, RetrievalTrainingJobSpec
from operators.errors import SpecError
from operators.objects import StorageUri, child_metadata
from operators.schema import load
from operators.settings import OperatorSettings

RAY_API_VERSION = "ray.io/v1"
HEAD_PORTS = (("gcs-server", 6379), ("dashboard", 8265), ("client", 10001))
SAVE_HF_MODEL = "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"
"""With promotion, verl also writes a Hugging Face copy of the actor in each RL checkpoint."""
LATEST_STEP_FILE = "latest_checkpointed_iteration.txt"
FINAL_LINK = "final"

# Hydra keys of each hyperparameter, per recipe family (checked against the recipes by the tests).
RL_KEYS: dict[str, tuple[str, ...]] = {
    "learning_rate": ("actor_rollout_ref.actor.optim.lr",),
    # one policy update per batch, as the recipe does: the mini-batch follows the batch
    "batch_size": ("data.train_batch_size", "actor_rollout_ref.actor.ppo_mini_batch_size"),
    "epochs": ("trainer.total_epochs",),
    "rollouts": ("actor_rollout_ref.rollout.n",),
    "kl_coef": ("actor_rollout_ref.actor.kl_loss_coef",),
    "clip_low": ("actor_rollout_ref.actor.clip_ratio_low",),
    "clip_high": ("actor_rollout_ref.actor.clip_ratio_high",),
}
SFT_KEYS: dict[str, tuple[str, ...]] = {
    "learning_rate": ("optim.lr",),
    "batch_size": ("data.train_batch_size",),
    "epochs": ("trainer.total_epochs",),
}


def spec_of(job: dict[str, Any]) -> RetrievalTrainingJobSpec:
    """The typed spec of a RetrievalTrainingJob, with the checks the CRD schema cannot express."""
    spec = load(RetrievalTrainingJobSpec, job.get("spec"), "spec")
    StorageUri.parse(spec.model, field="spec.model")
    keys = SFT_KEYS if spec.algorithm == "sft" else RL_KEYS
    hp = spec.hyperparameters
    for name in RL_KEYS:
        if getattr(hp, name) is not None and name not in keys:
            raise SpecError(
                f"does not apply to {spec.algorithm}", path=f"spec.hyperparameters.{_camel(name)}"
            )
    if hp.dynamic_sampling and spec.algorithm != "dapo":
        raise SpecError("dynamic sampling belongs to dapo", path="spec.hyperparameters.dynamicSampling")
    for i, o in enumerate(spec.overrides):
        if "=" not in o or not o.split("=", 1)[0]:
            raise SpecError(f"'{o}' is not KEY=VALUE", path=f"spec.overrides[{i}]")
    p = spec.promote
    if p and p.autoscaling.min_replicas > p.autoscaling.max_replicas:
        raise SpecError("minReplicas is above maxReplicas", path="spec.promote.autoscaling")
    if p and p.planner_card and spec.algorithm == "sft":
        raise SpecError("plannerCard carries the card of the planner an RL run started from; verl's SFT starts from "
                        "a base model without one", path="spec.promote.plannerCard")  # fmt: skip
    if p and p.planner_card and StorageUri.parse(spec.model).scheme == "hf":
        raise SpecError("plannerCard needs spec.model to be the planner directory the run starts from (pvc:// or "
                        "s3://), whose planner.json the served planner keeps", path="spec.promote.plannerCard")  # fmt: skip
    if p:
        check_transformer_options(p.planner_card, p.fusion, p.transformer, "spec.promote")
    return spec


def check_transformer_options(planner_card: bool, fusion: Fusion, transformer: bool, at: str) -> None:
    """Refuse a planner card or fusion the served planner cannot honour (a ``PlannerService``'s ``spec``, or a
    job's ``spec.promote``, at ``at``): the familiar gate reads the card, and both are the transformer's."""
    if fusion.gate == "familiar" and not planner_card:
        raise SpecError("fusion gate familiar reads the planner card's training requests: set plannerCard true",
                        path=f"{at}.fusion.gate")  # fmt: skip
    if (planner_card or fusion != Fusion()) and not transformer:
        raise SpecError(
            "fusion and plannerCard are the transformer's: set transformer true", path=f"{at}.transformer"
        )


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


def _number(value: float | int) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def experiment_dir(job: dict[str, Any], spec: RetrievalTrainingJobSpec) -> str:
    """The run's directory under the checkpoint root, as the recipe names it (SFT adds ``-sft``)."""
    name = str(job["metadata"]["name"])
    return f"{name}-sft" if spec.algorithm == "sft" else name


def run_dir(job: dict[str, Any], spec: RetrievalTrainingJobSpec, settings: OperatorSettings) -> str:
    """The run's checkpoint directory as the Ray pods mount it."""
    return (
        StorageUri.parse(spec.checkpoints).under(settings.checkpoint_mount) + "/" + experiment_dir(job, spec)
    )


def checkpoint_uri(job: dict[str, Any], spec: RetrievalTrainingJobSpec) -> str:
    """Where the run's checkpoints go, as a storage URI."""
    return StorageUri.parse(spec.checkpoints).join(experiment_dir(job, spec))


def promoted_model_uri(job: dict[str, Any], spec: RetrievalTrainingJobSpec) -> str:
    """The model directory a promotion serves: the ``final`` link the entrypoint writes."""
    return StorageUri.parse(spec.checkpoints).join(experiment_dir(job, spec), FINAL_LINK)


def reward_url(job: dict[str, Any], spec: RetrievalTrainingJobSpec) -> str:
    """Base URL of the reward service as seen from the Ray pods."""
    ref = spec.reward_service
    if ref.url:
        return ref.url.rstrip("/")
    namespace = ref.namespace or job["metadata"].get("namespace") or "default"
    return f"http://{ref.name}.{namespace}.svc:{ref.port}"


def model_argument(spec: RetrievalTrainingJobSpec, settings: OperatorSettings) -> str:
    """What ``--model`` gets: a Hugging Face id, or the directory a volume or init container provides."""
    uri = StorageUri.parse(spec.model, field="spec.model")
    if uri.scheme == "hf":
        return f"{uri.root}/{uri.path}" if uri.path else uri.root
    return uri.under(settings.model_mount) if uri.scheme == "pvc" else settings.model_mount


def launch_argv(job: dict[str, Any], spec: RetrievalTrainingJobSpec, settings: OperatorSettings) -> list[str]:
    """``prore train launch`` with what the resource sets; everything else is the recipe's."""
    ws = StorageUri.parse(spec.data.workspace).under(settings.workspace_mount)
    ckpt = StorageUri.parse(spec.checkpoints).under(settings.checkpoint_mount)
    r = spec.resources
    argv = ["prore", "--workspace", ws, "train", "launch", spec.algorithm,
            "--domain", spec.domain, "--model", model_argument(spec, settings),
            "--gpus-per-node", str(r.gpus_per_node), "--nodes", str(r.nodes),
            "--data-dir", f"{ws}/train/{spec.domain}", "--checkpoint-dir", ckpt,
            "--experiment", str(job["metadata"]["name"])]  # fmt: skip
    if spec.algorithm != "sft":  # SFT has no reward
        argv += ["--reward-url", reward_url(job, spec)]
    if spec.hyperparameters.dynamic_sampling:
        argv.append("--dynamic-sampling")
    keys = SFT_KEYS if spec.algorithm == "sft" else RL_KEYS
    sets: list[str] = []
    for name, hydra_keys in keys.items():
        value = getattr(spec.hyperparameters, name)
        if value is not None:
            sets += [f"{k}={_number(value)}" for k in hydra_keys]
    if spec.promote and spec.algorithm != "sft":
        sets.append(SAVE_HF_MODEL)
    sets += spec.overrides
    for s in sets:
        argv += ["--set", s]
    return argv


def from_verl_argv(
    job: dict[str, Any], spec: RetrievalTrainingJobSpec, settings: OperatorSettings
) -> list[str]:
    """``prore train from-verl``: the newest checkpoint step as a planner directory at ``final``, with the card
    (prompt profile, exemplar index, familiarity gate) of the planner the run started from."""
    out = run_dir(job, spec, settings)
    return ["prore", "train", "from-verl", out, "--init", model_argument(spec, settings),
            "--out", f"{out}/{FINAL_LINK}", "--algorithm", spec.algorithm]  # fmt: skip


def entrypoint(job: dict[str, Any], spec: RetrievalTrainingJobSpec, settings: OperatorSettings) -> str:
    """The RayJob's shell entrypoint (see the module docstring)."""
    ws = StorageUri.parse(spec.data.workspace).under(settings.workspace_mount)
    steps: list[str] = []
    if spec.data.export:
        steps.append(shlex.join(["prore", "--workspace", ws, "train", "export", spec.domain]))
    steps.append(shlex.join(launch_argv(job, spec, settings)))
    if spec.promote:
        if spec.promote.planner_card:
            steps.append(shlex.join(from_verl_argv(job, spec, settings)))
        else:
            hf_dir = "huggingface" if spec.algorithm == "sft" else "actor/huggingface"
            steps.append(f"cd {shlex.quote(run_dir(job, spec, settings))} && ln -sfn \"global_step_$(cat {LATEST_STEP_FILE})/{hf_dir}\" "
                         f"{FINAL_LINK}")  # fmt: skip
    return " && ".join(steps)


def runtime_env(
    job: dict[str, Any], spec: RetrievalTrainingJobSpec, settings: OperatorSettings
) -> dict[str, Any]:
    """Ray's runtime environment of the job: the variables every Ray process sees."""
    env = {
        "PRORE_WORKSPACE": StorageUri.parse(spec.data.workspace).under(settings.workspace_mount),
        # prore defaults to offline for laptops and CI; a cluster pulls hf:// models from the hub.
        "HF_HUB_OFFLINE": "0" if spec.model.startswith("hf://") else "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    if spec.algorithm != "sft":
        env["PRORE_REWARD_URL"] = reward_url(job, spec)
    return {"env_vars": env}


def _volumes(spec: RetrievalTrainingJobSpec, settings: OperatorSettings) -> tuple[list[Any], list[Any]]:
    ws = StorageUri.parse(spec.data.workspace)
    ckpt = StorageUri.parse(spec.checkpoints)
    volumes: list[dict[str, Any]] = [
        {"name": "workspace", "persistentVolumeClaim": {"claimName": ws.root}},
        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": ckpt.root}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.resources.shm_size}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "workspace", "mountPath": settings.workspace_mount},
        {"name": "checkpoints", "mountPath": settings.checkpoint_mount},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    model = StorageUri.parse(spec.model)
    if model.scheme == "pvc":
        volumes.append(
            {"name": "model", "persistentVolumeClaim": {"claimName": model.root, "readOnly": True}}
        )
        mounts.append({"name": "model", "mountPath": settings.model_mount, "readOnly": True})
    elif model.scheme == "s3":
        volumes.append({"name": "model", "emptyDir": {}})
        mounts.append({"name": "model", "mountPath": settings.model_mount})
    return volumes, mounts


def _init_containers(spec: RetrievalTrainingJobSpec, settings: OperatorSettings) -> list[dict[str, Any]]:
    model = StorageUri.parse(spec.model)
    if model.scheme != "s3":
        return []
    return [{
        "name": "fetch-model",
        "image": settings.s3_image,
        "args": ["s3", "cp", "--recursive", str(model), settings.model_mount],
        "envFrom": [{"secretRef": {"name": "proretrieval-s3", "optional": True}}],
        "volumeMounts": [{"name": "model", "mountPath": settings.model_mount}],
    }]  # fmt: skip


def _pod(spec: RetrievalTrainingJobSpec, settings: OperatorSettings, *, head: bool) -> dict[str, Any]:
    r = spec.resources
    volumes, mounts = _volumes(spec, settings)
    limits: dict[str, Any] = {"cpu": r.head_cpu if head else r.worker_cpu,
                              "memory": r.head_memory if head else r.worker_memory}  # fmt: skip
    if not head:
        limits[settings.gpu_resource] = r.gpus_per_node
    container: dict[str, Any] = {
        "name": "ray-head" if head else "ray-worker",
        "image": spec.image or settings.training_image,
        "resources": {"requests": dict(limits), "limits": dict(limits)},
        "volumeMounts": mounts,
    }
    if head:
        container["ports"] = [{"name": n, "containerPort": p} for n, p in HEAD_PORTS]
    pod: dict[str, Any] = {"containers": [container], "volumes": volumes}
    init = _init_containers(spec, settings)
    if init:
        pod["initContainers"] = init
    if not head:
        pod["nodeSelector"] = {settings.gpu_label: r.gpu_type}
        pod["tolerations"] = [{"key": settings.gpu_resource, "operator": "Exists", "effect": "NoSchedule"}]
    return {"spec": pod}


def rayjob(job: dict[str, Any], settings: OperatorSettings | None = None) -> dict[str, Any]:
    """The RayJob of RetrievalTrainingJob ``job`` (a resource dict with metadata and spec)."""
    settings = settings or OperatorSettings()
    spec = spec_of(job)
    name = str(job["metadata"]["name"])
    run = spec.run
    return {
        "apiVersion": RAY_API_VERSION,
        "kind": "RayJob",
        "metadata": child_metadata(job, name, component="training", **{"proretrieval.io/algorithm": spec.algorithm}),
        "spec": {
            "entrypoint": entrypoint(job, spec, settings),
            "runtimeEnvYAML": yaml.safe_dump(runtime_env(job, spec, settings), sort_keys=True),
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": run.ttl_seconds_after_finished,
            "activeDeadlineSeconds": run.active_deadline_seconds,
            "preRunningDeadlineSeconds": run.pre_running_deadline_seconds,
            "backoffLimit": run.backoff_limit,
            "submitterConfig": {"backoffLimit": run.submitter_backoff_limit},
            "metadata": {"proretrieval.io/job": name, "proretrieval.io/algorithm": spec.algorithm},
            "rayClusterSpec": {
                "headGroupSpec": {
                    # the head schedules the driver only; verl's GPU workers are the worker group
                    "rayStartParams": {"dashboard-host": "0.0.0.0", "num-gpus": "0"},
                    "template": _pod(spec, settings, head=True),
                },
                "workerGroupSpecs": [{
                    "groupName": "gpu",
                    "replicas": spec.resources.nodes,
                    "minReplicas": spec.resources.nodes,
                    "maxReplicas": spec.resources.nodes,
                    "rayStartParams": {},
                    "template": _pod(spec, settings, head=False),
                }],
            },
        },
    }  # fmt: skip

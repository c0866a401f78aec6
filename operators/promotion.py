"""Reconcile, promotion: a succeeded run becomes a ``PlannerService``, which becomes an InferenceService,
a KEDA ScaledObject and a ServiceMonitor (pure functions).

- **InferenceService** (KServe 0.20, ``Standard`` deployment mode): the predictor is KServe's Hugging Face
  server with the vLLM backend (OpenAI-compatible, under ``/openai/v1``) on GPU nodes, or, for ``runtime:
  seq2seq``, the encoder-decoder planner's model server (``python -m serving.kserve_seq2seq``, the same routes)
  as a custom container on CPU nodes, its model put at ``/mnt/models`` by KServe's storage initializer from
  ``STORAGE_URI``; the project's
  ``kserve.Model`` (``python -m serving.kserve``: NL in, program, candidates and ranked results out) is the
  transformer in front of it, over the workspace's indexes (in the stores the settings name, else the
  workspace's embedded ones). KServe wires the two: it appends
  ``--model_name <name> --predictor_host <name>-predictor.<namespace> --http_port 8080`` to the
  transformer's arguments, so clients call ``/v1/models/<name>:predict`` (or the OpenAI chat route with
  ``"model": "<name>"``) and the transformer calls ``/openai/v1/chat/completions`` on the predictor with the
  model name the predictor serves (``servedModelName``).
  ``serving.kserve.io/autoscalerClass: external`` keeps KServe from creating its own HPA, because the
  ScaledObject owns the predictor's replica count.
- **ScaledObject**: scales the predictor Deployment (``<name>-predictor``) between the bounds on
  vLLM's waiting requests (``vllm:num_requests_waiting``), summed over the model's replicas, read from
  Prometheus; a seq2seq predictor, which has no queue metric, on its CPU use (KEDA's ``cpu`` trigger).
- **ServiceMonitor**: has Prometheus scrape the predictor's ``/metrics``, where that metric comes from.
"""

from __future__ import annotations

from typing import Any

from operators.api import API_VERSION, PLANNER_SERVICE, PlannerServiceSpec
from operators.errors import SpecError
from operators.objects import child_metadata
from operators.schema import dump, load
from operators.settings import OperatorSettings
from operators.training import check_transformer_options, promoted_model_uri, spec_of

ISVC_API_VERSION = "serving.kserve.io/v1beta1"
KEDA_API_VERSION = "keda.sh/v1alpha1"
MONITORING_API_VERSION = "monitoring.coreos.com/v1"
KSERVE_HTTP_PORT = 8080
HF_OPENAI_PATH = "/openai/v1"
"""Base path of the OpenAI-compatible routes of KServe's Hugging Face server (KServe's ``/openai`` prefix)."""
TRANSFORMER_ENV = {
    "HOME": "/tmp",
    "HF_HOME": "/tmp/hf",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
"""The transformer's environment, as the chart's services have it: a writable home on the read-only root
filesystem, and the embedder from the image."""


def planner_service(job: dict[str, Any], settings: OperatorSettings | None = None) -> dict[str, Any] | None:
    """The PlannerService a succeeded RetrievalTrainingJob asks for; None without ``spec.promote``."""
    spec = spec_of(job)
    if spec.promote is None:
        return None
    p = spec.promote
    name = p.name or str(job["metadata"]["name"])
    ps = PlannerServiceSpec(
        model=promoted_model_uri(job, spec),
        gpu_type=p.gpu_type or spec.resources.gpu_type,
        autoscaling=p.autoscaling,
        transformer=p.transformer,
        planner_card=p.planner_card,
        fusion=p.fusion,
        source_job=str(job["metadata"]["name"]),
    )
    return {
        "apiVersion": API_VERSION,
        "kind": PLANNER_SERVICE.kind,
        "metadata": child_metadata(job, name, component="planner"),
        "spec": dump(ps),
    }


def planner_spec(ps: dict[str, Any]) -> PlannerServiceSpec:
    """The typed spec of a PlannerService, with the checks its CRD schema cannot express."""
    spec = load(PlannerServiceSpec, ps.get("spec"), "spec")
    if spec.autoscaling.min_replicas > spec.autoscaling.max_replicas:
        raise SpecError("minReplicas is above maxReplicas", path="spec.autoscaling")
    if (spec.runtime == "seq2seq") != (spec.prompt_profile == "request"):
        raise SpecError("promptProfile request is the encoder-decoder planner's, and runtime seq2seq reads only "
                        f"it (got runtime {spec.runtime} with promptProfile {spec.prompt_profile})",
                        path="spec.promptProfile")  # fmt: skip
    if spec.runtime == "seq2seq" and spec.planner_output == "json":
        raise SpecError("runtime seq2seq decodes under a grammar (plannerOutput grammar or grounded) or free, "
                        "not under the JSON schema", path="spec.plannerOutput")  # fmt: skip
    check_transformer_options(spec.planner_card, spec.fusion, spec.transformer, "spec")
    return spec


def predictor_name(ps: dict[str, Any]) -> str:
    """KServe's name of the predictor Deployment and Service (``constants.PredictorServiceName``)."""
    return f"{ps['metadata']['name']}-predictor"


def _gpu_placement(spec: PlannerServiceSpec, settings: OperatorSettings) -> dict[str, Any]:
    return {"nodeSelector": {settings.gpu_label: spec.gpu_type},
            "tolerations": [{"key": settings.gpu_resource, "operator": "Exists", "effect": "NoSchedule"}]}  # fmt: skip


def inference_service(ps: dict[str, Any], settings: OperatorSettings | None = None) -> dict[str, Any]:
    """The InferenceService of PlannerService ``ps``."""
    settings = settings or OperatorSettings()
    spec = planner_spec(ps)
    name = str(ps["metadata"]["name"])
    meta = child_metadata(ps, name, component="planner-endpoint")
    meta["annotations"] = {
        "serving.kserve.io/deploymentMode": "Standard",
        "serving.kserve.io/autoscalerClass": "external",
        "serving.kserve.io/enable-prometheus-scraping": "true",
    }
    bounds = {"minReplicas": spec.autoscaling.min_replicas, "maxReplicas": spec.autoscaling.max_replicas}
    predictor: dict[str, Any] = (
        {
            **bounds,
            "containers": [_seq2seq_predictor(spec, settings)],
            "volumes": [{"name": "tmp", "emptyDir": {}}],
        }
        if spec.runtime == "seq2seq"
        else _vllm_predictor(spec, settings, bounds)
    )
    out: dict[str, Any] = {"apiVersion": ISVC_API_VERSION, "kind": "InferenceService", "metadata": meta,
                           "spec": {"predictor": predictor}}  # fmt: skip
    if spec.transformer:
        out["spec"]["transformer"] = _transformer(spec, settings)
    return out


def _vllm_predictor(
    spec: PlannerServiceSpec, settings: OperatorSettings, bounds: dict[str, int]
) -> dict[str, Any]:
    """KServe's Hugging Face server on vLLM, on GPU nodes."""
    gpus = {"cpu": "4", "memory": "32Gi", settings.gpu_resource: spec.gpus}
    return {
        **bounds,
        **_gpu_placement(spec, settings),
        "model": {
            "modelFormat": {"name": "huggingface"},
            "runtime": settings.hf_runtime,
            "storageUri": spec.model,
            "args": [
                f"--model_name={spec.served_model_name}",
                "--backend=vllm",
                f"--max_model_len={spec.max_model_len}",
            ],
            "resources": {"requests": dict(gpus), "limits": dict(gpus)},
        },
    }


SEQ2SEQ_COMMAND = ("python", "-m", "serving.kserve_seq2seq")
"""The encoder-decoder planner's model server (KServe's ModelServer with one OpenAI chat model)."""
KSERVE_MODEL_DIR = "/mnt/models"
"""Where KServe's storage initializer puts a custom container's ``STORAGE_URI``."""


def _kserve_container(spec: PlannerServiceSpec, settings: OperatorSettings, *, command: list[str], args: list[str],
                      env: list[dict[str, Any]], resources: dict[str, Any],
                      mounts: list[dict[str, str]]) -> dict[str, Any]:  # fmt: skip
    """One of the project's containers under KServe's ModelServer (the transformer, or the seq2seq predictor): the
    transformer's image, KServe's HTTP port and health routes (``/v2/health/ready`` answers 503 until every model
    is ready), non-root on a read-only root filesystem, as the chart's services run."""
    return {
        "name": "kserve-container",
        "image": spec.transformer_image or settings.transformer_image,
        "command": command,
        "args": args,
        "env": env,
        "ports": [{"name": "http", "containerPort": KSERVE_HTTP_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": KSERVE_HTTP_PORT}, "periodSeconds": 10},
        "livenessProbe": {"httpGet": {"path": "/v2/health/live", "port": KSERVE_HTTP_PORT}, "periodSeconds": 20},
        "resources": resources,
        "securityContext": {"runAsNonRoot": True, "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": mounts,
    }  # fmt: skip


def _env(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in values.items()]


def _seq2seq_predictor(spec: PlannerServiceSpec, settings: OperatorSettings) -> dict[str, Any]:
    """The encoder-decoder planner's predictor: a custom container (the transformer's image) that KServe's
    storage initializer gives the model at :data:`KSERVE_MODEL_DIR` (from ``STORAGE_URI``), on CPU nodes."""
    cpu = {"cpu": "2", "memory": "4Gi"}
    return _kserve_container(
        spec, settings, command=list(SEQ2SEQ_COMMAND),
        args=[f"--model_dir={KSERVE_MODEL_DIR}", f"--model_name={spec.served_model_name}",
              f"--http_port={KSERVE_HTTP_PORT}"],
        env=_env({"STORAGE_URI": spec.model, **TRANSFORMER_ENV, "OMP_NUM_THREADS": cpu["cpu"]}),
        resources={"requests": dict(cpu), "limits": dict(cpu)}, mounts=[{"name": "tmp", "mountPath": "/tmp"}],
    )  # fmt: skip


def transformer_args(spec: PlannerServiceSpec, settings: OperatorSettings) -> list[str]:
    """The transformer's own arguments, with the stores' URLs where the settings name them (else the workspace's
    embedded stores). KServe appends ``--model_name``, ``--predictor_host`` and ``--http_port`` after them (only
    where an argument does not already start with that flag)."""
    prompt = (
        f"--planner_card={KSERVE_MODEL_DIR}"
        if spec.planner_card
        else f"--planner_profile={spec.prompt_profile}"
    )
    args = [f"--workspace={settings.workspace_mount}", f"--predictor_path={HF_OPENAI_PATH}",
            f"--planner_model={spec.served_model_name}", prompt, f"--planner_output={spec.planner_output}",
            f"--guided_samples={spec.fusion.guided_samples}", f"--fuse={spec.fusion.fuse}",
            f"--fuse_gate={spec.fusion.gate}"]  # fmt: skip
    if settings.clickhouse_url:
        args.append(f"--clickhouse_url={settings.clickhouse_url}")
    if settings.milvus_uri:
        args.append(f"--milvus_uri={settings.milvus_uri}")
    return args


STORE_CREDENTIAL_KEYS = (
    "CLICKHOUSE_USER",
    "CLICKHOUSE_PASSWORD",
    "MILVUS_USER",
    "MILVUS_PASSWORD",
    "MILVUS_TOKEN",
)
"""The variables the project's store clients read credentials from (``indexing.stores.credentials``)."""


def credential_env(settings: OperatorSettings) -> list[dict[str, Any]]:
    """The store credentials as variables from the settings' Secret (each key optional); none without one.

    >>> credential_env(OperatorSettings(credentials_secret="stores-reader"))[0]
    {'name': 'CLICKHOUSE_USER', 'valueFrom': {'secretKeyRef': {'name': 'stores-reader', 'key': 'CLICKHOUSE_USER', 'optional': True}}}
    >>> credential_env(OperatorSettings())
    []
    """
    if not settings.credentials_secret:
        return []
    secret = settings.credentials_secret
    return [
        {"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": True}}}
        for key in STORE_CREDENTIAL_KEYS
    ]


def _transformer(spec: PlannerServiceSpec, settings: OperatorSettings) -> dict[str, Any]:
    return {
        "minReplicas": 1,
        "maxReplicas": spec.autoscaling.max_replicas,
        "containers": [_kserve_container(
            spec, settings, command=list(settings.transformer_command), args=transformer_args(spec, settings),
            env=_env({**TRANSFORMER_ENV, **({"STORAGE_URI": spec.model} if spec.planner_card else {})})
            + credential_env(settings),
            resources={"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}},
            mounts=[{"name": "workspace", "mountPath": settings.workspace_mount}, {"name": "tmp", "mountPath": "/tmp"}],
        )],
        "volumes": [{"name": "workspace", "persistentVolumeClaim": {"claimName": settings.workspace_claim}},
                    {"name": "tmp", "emptyDir": {}}],
    }  # fmt: skip


def queue_query(ps: dict[str, Any], spec: PlannerServiceSpec) -> str:
    """PromQL of the waiting requests of this endpoint's model, over all its replicas."""
    namespace = ps["metadata"].get("namespace") or "default"
    return f'sum({spec.autoscaling.metric}{{namespace="{namespace}",model_name="{spec.served_model_name}"}})'


def scaled_object(ps: dict[str, Any], settings: OperatorSettings | None = None) -> dict[str, Any]:
    """The KEDA ScaledObject that scales the predictor on vLLM's queue (a seq2seq predictor: on its CPU use)."""
    settings = settings or OperatorSettings()
    spec = planner_spec(ps)
    a = spec.autoscaling
    trigger: dict[str, Any] = (
        # no queue metric: the model server generates on its own CPUs
        {"type": "cpu", "metricType": "Utilization", "metadata": {"value": str(a.cpu_utilization)}}
        if spec.runtime == "seq2seq"
        else {"type": "prometheus", "metricType": "AverageValue",
              "metadata": {"serverAddress": a.prometheus_address or settings.prometheus_address,
                           "query": queue_query(ps, spec), "threshold": f"{a.target:g}"}}
    )  # fmt: skip
    return {
        "apiVersion": KEDA_API_VERSION,
        "kind": "ScaledObject",
        "metadata": child_metadata(ps, predictor_name(ps), component="planner-autoscaler"),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": predictor_name(ps)},
            "minReplicaCount": a.min_replicas,
            "maxReplicaCount": a.max_replicas,
            "pollingInterval": a.polling_interval_seconds,
            "cooldownPeriod": a.cooldown_seconds,
            "triggers": [trigger],
        },
    }  # fmt: skip


def service_monitor(ps: dict[str, Any]) -> dict[str, Any]:
    """The ServiceMonitor of the predictor's vLLM metrics."""
    planner_spec(ps)
    name = str(ps["metadata"]["name"])
    return {
        "apiVersion": MONITORING_API_VERSION,
        "kind": "ServiceMonitor",
        "metadata": child_metadata(ps, predictor_name(ps), component="planner-metrics"),
        "spec": {
            "selector": {
                "matchLabels": {"serving.kserve.io/inferenceservice": name, "component": "predictor"}
            },
            "endpoints": [{"targetPort": KSERVE_HTTP_PORT, "path": "/metrics", "interval": "15s"}],
        },
    }


def planner_children(ps: dict[str, Any], settings: OperatorSettings | None = None) -> list[dict[str, Any]]:
    """Everything a PlannerService owns, in the order they are created."""
    return [inference_service(ps, settings), scaled_object(ps, settings), service_monitor(ps)]

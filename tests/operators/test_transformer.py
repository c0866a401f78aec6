"""The planner endpoint's transformer as KServe 0.20 starts it: the operator's command and arguments, then the
arguments KServe's controller appends, read by ``serving.kserve``'s own argument parser.

What KServe appends is ``CustomTransformer.GetContainer`` at ``v0.20.0``
(``pkg/apis/serving/v1beta1/transformer_custom.go``): ``--model_name <InferenceService name>``,
``--predictor_host <name>-predictor.<namespace>`` (``constants.PredictorServiceName``), ``--http_port 8080``
(``constants.InferenceServiceDefaultHttpPort``) and, only when the component sets ``containerConcurrency``,
``--workers N``; each only where no argument already starts with that flag (``utils.IncludesArg``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.api import FUSE_GATES, FUSE_PARTNERS, PLANNER_OUTPUTS, PROMPT_PROFILES
from operators.promotion import HF_OPENAI_PATH, KSERVE_HTTP_PORT, predictor_name
from operators.render import render_documents
from operators.settings import OperatorSettings
from tests.operators.schemas import REPO, validate

pytest.importorskip(
    "kserve", reason="pip install '.[kserve]' (serving.kserve's parser is KServe's ModelServer's)"
)

from serving.kserve import DEFAULTS, SERVING_FLAGS, api_settings, config, parse_args, planner_settings
from serving.planner import OUTPUTS
from serving.prompt import PROFILES
from serving.settings import FUSE_GATES as SERVING_FUSE_GATES
from serving.settings import FUSE_PARTNERS as SERVING_FUSE_PARTNERS
from serving.settings import ServingSettings

PLANNER_SERVICE = REPO / "examples" / "k8s" / "planner-service.yaml"


def kserve_appended(args: list[str], isvc: dict[str, Any], predictor: str,
                    container_concurrency: int | None = None) -> list[str]:  # fmt: skip
    """The transformer container's args once KServe 0.20's controller has appended its own."""
    out = list(args)

    def includes(flag: str) -> bool:  # utils.IncludesArg: equal, or starts with the flag
        return any(a == flag or a.startswith(flag) for a in out)

    if not includes("--model_name"):
        out += ["--model_name", isvc["metadata"]["name"]]
    if not includes("--predictor_host"):
        out += ["--predictor_host", f"{predictor}.{isvc['metadata']['namespace']}"]
    if not includes("--http_port"):
        out += ["--http_port", "8080"]
    if not includes("--workers") and container_concurrency is not None:
        out += ["--workers", str(container_concurrency)]
    return out


def _endpoint(
    path: Path = PLANNER_SERVICE, settings: OperatorSettings | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The PlannerService and its InferenceService, as the operator renders them."""
    docs = render_documents(path.read_text(), settings)
    isvc = next(d for d in docs if d["kind"] == "InferenceService")
    ps = {"metadata": {"name": isvc["metadata"]["name"], "namespace": isvc["metadata"]["namespace"]}}
    return ps, isvc


def _last(args: list[str], flag: str) -> str:
    """The value argparse keeps for ``flag=VALUE`` given several times: the last."""
    return [a.split("=", 1)[1] for a in args if a.startswith(flag + "=")][-1]


@pytest.mark.parametrize("container_concurrency", [None, 1])
def test_the_transformer_argv_parses_with_serving_kserve(container_concurrency: int | None) -> None:
    ps, isvc = _endpoint()
    validate(isvc)
    container = isvc["spec"]["transformer"]["containers"][0]
    assert container["command"] == [
        "python",
        "-m",
        "serving.kserve",
    ]  # no shell: KServe's args reach the parser
    argv = kserve_appended(container["args"], isvc, predictor_name(ps), container_concurrency)
    args = parse_args(argv)  # exits 2 on an argument it does not know

    name, namespace = isvc["metadata"]["name"], isvc["metadata"]["namespace"]
    assert args.model_name == name  # clients call /v1/models/<name>:predict
    assert args.http_port == KSERVE_HTTP_PORT == container["ports"][0]["containerPort"]
    assert args.predictor_host == f"{name}-predictor.{namespace}"
    assert args.workers == 1
    predictor_args = isvc["spec"]["predictor"]["model"]["args"]
    planner = planner_settings(args, config(args))
    assert planner.model == _last(predictor_args, "--model_name")  # the name the HF runtime serves
    assert args.predictor_path == HF_OPENAI_PATH == "/openai/v1"
    assert planner.url == f"http://{name}-predictor.{namespace}/openai/v1"
    assert planner.profile == "full"  # the spec's default: a verl run's


def test_the_transformer_prompts_with_the_services_profile() -> None:
    """A PlannerService's ``promptProfile`` reaches the transformer's planner client; the operator's enum is the
    prompt builder's (it imports no product package, so the list is written twice and checked here)."""
    assert PROMPT_PROFILES == PROFILES
    ps = yaml.safe_load(PLANNER_SERVICE.read_text())
    ps["spec"]["promptProfile"] = "compact"
    isvc = next(d for d in render_documents(yaml.safe_dump(ps)) if d["kind"] == "InferenceService")
    args = parse_args(kserve_appended(isvc["spec"]["transformer"]["containers"][0]["args"], isvc, "p"))
    assert planner_settings(args, config(args)).profile == "compact"


def test_the_transformer_constrains_decoding_as_the_service_says() -> None:
    """``plannerOutput`` reaches the transformer's planner client (default json); the operator's enum is the
    client's."""
    assert PLANNER_OUTPUTS == OUTPUTS
    assert (FUSE_PARTNERS, FUSE_GATES) == (SERVING_FUSE_PARTNERS, SERVING_FUSE_GATES)  # spec.fusion's enums
    ps = yaml.safe_load(PLANNER_SERVICE.read_text())
    for given, wanted in ((None, "json"), ("grammar", "grammar")):
        if given:
            ps["spec"]["plannerOutput"] = given
        isvc = next(d for d in render_documents(yaml.safe_dump(ps)) if d["kind"] == "InferenceService")
        args = parse_args(kserve_appended(isvc["spec"]["transformer"]["containers"][0]["args"], isvc, "p"))
        assert planner_settings(args, config(args)).output == wanted


def test_a_seq2seq_predictor_is_the_projects_model_server_which_the_transformer_asks() -> None:
    """``runtime: seq2seq``: the predictor is ``python -m serving.kserve_seq2seq`` (its own parser reads the
    rendered arguments), the model is the storage initializer's ``/mnt/models`` (``STORAGE_URI``), no GPU, and the
    transformer asks it for the served model under the grounded grammar. The example's transformer also answers
    as the README's serving line (``prore serve --planner-card M --guided-samples 8 --fuse self-query --fuse-gate
    familiar``): ``plannerCard`` gives it the model directory too, at the same ``/mnt/models`` (KServe reads a
    custom transformer's ``STORAGE_URI`` as a predictor's), and the card in place of a prompt profile."""
    from serving.kserve_seq2seq import arg_parser

    ps, isvc = _endpoint(PLANNER_SERVICE.with_name("planner-service-seq2seq.yaml"))
    validate(isvc)
    predictor = isvc["spec"]["predictor"]
    assert "model" not in predictor and "nodeSelector" not in predictor
    (container,) = predictor["containers"]
    assert container["name"] == "kserve-container"  # the one KServe's storage initializer serves
    assert container["command"] == ["python", "-m", "serving.kserve_seq2seq"]
    args = arg_parser().parse_args(container["args"])  # exits 2 on an argument it does not know
    env = {e["name"]: e["value"] for e in container["env"]}
    assert args.model_dir == "/mnt/models" and env["STORAGE_URI"].startswith("pvc://")
    assert args.http_port == KSERVE_HTTP_PORT == container["ports"][0]["containerPort"]
    assert not any("gpu" in k for k in container["resources"]["limits"])
    front = isvc["spec"]["transformer"]["containers"][0]
    assert front["name"] == "kserve-container"
    assert {"name": "STORAGE_URI", "value": env["STORAGE_URI"]} in front["env"], (
        "the transformer reads the card"
    )
    transformer = parse_args(kserve_appended(front["args"], isvc, predictor_name(ps)))
    cfg = config(transformer)
    # the card itself is read when the transformer starts, from what the storage initializer wrote
    planner = SERVING_FLAGS.over(cfg.section(ServingSettings), transformer).planner
    assert (planner.card, planner.profile, planner.output) == ("/mnt/models", "full", "grounded")
    assert not any(a.startswith("--planner_profile") for a in front["args"]), (
        "the card's profile, not the spec's"
    )
    assert planner.model == args.model_name and planner.guided_samples == 8
    assert (api_settings(transformer, cfg).fuse, api_settings(transformer, cfg).fuse_gate) == (
        "self-query",
        "familiar",
    )
    assert transformer.predictor_host.endswith(f"-predictor.{isvc['metadata']['namespace']}")
    assert transformer.predictor_path == HF_OPENAI_PATH
    scaled = next(d for d in render_documents(PLANNER_SERVICE.with_name("planner-service-seq2seq.yaml").read_text())
                  if d["kind"] == "ScaledObject")  # fmt: skip
    assert scaled["spec"]["triggers"] == [
        {"type": "cpu", "metricType": "Utilization", "metadata": {"value": "70"}}
    ]


def test_the_transformer_serves_the_mounted_workspace() -> None:
    _, isvc = _endpoint()
    spec = isvc["spec"]["transformer"]
    container = spec["containers"][0]
    args = parse_args(kserve_appended(container["args"], isvc, "p"))
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volume = next(v for v in spec["volumes"] if v["name"] == mounts[args.workspace])
    assert volume["persistentVolumeClaim"]["claimName"] == "proretrieval-workspace"
    assert mounts["/tmp"] in {
        v["name"] for v in spec["volumes"] if "emptyDir" in v
    }  # the root FS is read-only


def test_the_operator_leaves_kserves_flags_to_kserve() -> None:
    """An own argument starting with one of KServe's flags would stop KServe from appending its value."""
    _, isvc = _endpoint()
    own = isvc["spec"]["transformer"]["containers"][0]["args"]
    for flag in ("--model_name", "--predictor_host", "--http_port", "--workers"):
        assert not [a for a in own if a.startswith(flag)], flag


def test_the_parser_refuses_what_it_does_not_know() -> None:
    """The parse above means something: an unknown or abbreviated argument, a missing workspace or predictor,
    or several workers exit 2."""
    _, isvc = _endpoint()
    argv = kserve_appended(isvc["spec"]["transformer"]["containers"][0]["args"], isvc, "p")
    for bad in ([*argv, "--predictor_hots", "x"], [*argv, "--predictor_pat", "/v1"],
                [a for a in argv if not a.startswith("--workspace")], [*argv, "--workers", "2"]):  # fmt: skip
        with pytest.raises(SystemExit) as exc:
            parse_args(bad)
        assert exc.value.code == 2
    missing = argv[: argv.index("--predictor_host")] + argv[argv.index("--predictor_host") + 2 :]
    with pytest.raises(SystemExit) as exc:
        parse_args(missing)
    assert exc.value.code == 2


CLICKHOUSE = "http://clickhouse-proretrieval.stores.svc:8123"
MILVUS = "http://proretrieval-milvus.stores.svc:19530"


def _transformer_config(settings: OperatorSettings | None = None, *extra: str) -> Any:
    """The config ``serving.kserve`` opens its engines with, from the container KServe starts."""
    _, isvc = _endpoint(settings=settings)
    argv = kserve_appended(isvc["spec"]["transformer"]["containers"][0]["args"], isvc, "p")
    return config(parse_args([*argv, *extra]))


def test_the_stores_the_settings_name_reach_the_engines_config() -> None:
    settings = OperatorSettings(clickhouse_url=CLICKHOUSE, milvus_uri=MILVUS)
    _, isvc = _endpoint(settings=settings)
    own = isvc["spec"]["transformer"]["containers"][0]["args"]
    assert f"--clickhouse_url={CLICKHOUSE}" in own and f"--milvus_uri={MILVUS}" in own
    cfg = _transformer_config(settings)
    assert cfg.clickhouse.url == CLICKHOUSE
    assert cfg.milvus.uri == MILVUS
    assert str(cfg.workspace) == OperatorSettings().workspace_mount


def test_without_store_settings_the_transformer_opens_the_embedded_stores() -> None:
    _, isvc = _endpoint()
    own = isvc["spec"]["transformer"]["containers"][0]["args"]
    assert not [a for a in own if a.startswith(("--clickhouse", "--milvus"))]
    cfg = _transformer_config()
    assert cfg.clickhouse.url is None and cfg.milvus.uri is None  # chDB and Milvus Lite in the workspace


def test_one_store_setting_leaves_the_other_store_embedded() -> None:
    cfg = _transformer_config(OperatorSettings(milvus_uri=MILVUS))
    assert cfg.milvus.uri == MILVUS and cfg.clickhouse.url is None


def test_the_store_flags_compose_the_config_as_prores_do(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The same config as ``prore --config F --workspace W --clickhouse-url U --milvus-uri M config`` prints: the
    flags over the file, the file over the defaults (the transformer's :data:`~serving.kserve.DEFAULTS` over the
    classes')."""
    import os

    import yaml

    from prore.cli import main
    from prore.config import as_mapping

    for name, value in (
        ("HF_HUB_OFFLINE", "1"),
        ("TOKENIZERS_PARALLELISM", "false"),
    ):  # prore's main sets them
        monkeypatch.setenv(name, os.environ.get(name, value))
    cfg_file = tmp_path / "prore.yaml"
    cfg_file.write_text(yaml.safe_dump({"clickhouse": {"url": "http://file:8123", "database": "fromfile"},
                                        "milvus": {"uri": "http://file:19530", "index_type": "HNSW"}}))  # fmt: skip
    settings = OperatorSettings(clickhouse_url=CLICKHOUSE, milvus_uri=MILVUS)
    ours = _transformer_config(settings, f"--config={cfg_file}")
    assert (ours.clickhouse.url, ours.clickhouse.database) == (CLICKHOUSE, "fromfile")
    assert (ours.milvus.uri, ours.milvus.index_type) == (MILVUS, "HNSW")

    assert main([f"--config={cfg_file}", f"--workspace={settings.workspace_mount}", f"--clickhouse-url={CLICKHOUSE}",
                 f"--milvus-uri={MILVUS}", "config"]) == 0  # fmt: skip
    printed = yaml.safe_load(capsys.readouterr().out)
    for key, value in DEFAULTS.items():  # the transformer's own defaults, where they differ from prore's
        *path, last = key.split(".")
        node = printed
        for part in path:
            node = node[part]
        assert node[last] != value
        node[last] = value
    assert printed == as_mapping(ours)


def test_the_transformer_reads_the_store_credentials_from_the_query_secret() -> None:
    _, isvc = _endpoint(settings=OperatorSettings(credentials_secret="proretrieval-stores-reader"))
    env = isvc["spec"]["transformer"]["containers"][0]["env"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in env if "valueFrom" in e}
    assert set(refs) == {
        "CLICKHOUSE_USER",
        "CLICKHOUSE_PASSWORD",
        "MILVUS_USER",
        "MILVUS_PASSWORD",
        "MILVUS_TOKEN",
    }
    assert all(r["name"] == "proretrieval-stores-reader" and r["optional"] for r in refs.values())
    validate(isvc)
    _, plain = _endpoint()
    assert not [e for e in plain["spec"]["transformer"]["containers"][0]["env"] if "valueFrom" in e]

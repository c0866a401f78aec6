"""One unit test per chart template (``test_<template>`` or ``test_<template>__<case>``), asserting on paths
of the rendered object for given values, as KubeRay's chart tests do."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from indexing.stores.credentials import ENV_KEYS
from tests.charts.chart import container, one, production_values, render

RUN_AS = {"runAsNonRoot": True, "readOnlyRootFilesystem": True}


def _hardened(obj: dict[str, Any]) -> None:
    pod = obj["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    c = container(obj)
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["resources"]["requests"] and c["resources"]["limits"]


def test_reward_deployment() -> None:
    d = one(render(), "reward-deployment.yaml")
    c = container(d)
    assert d["metadata"]["name"] == "pr-proretrieval-reward"
    assert c["command"] == ["prore", "reward", "serve"]
    assert c["args"][:4] == ["--host=0.0.0.0", "--port=8790", "--domain=ecommerce", "--domain=email"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert "replicas" not in d["spec"]  # the HPA owns the count
    _hardened(d)


def test_reward_deployment__stores_and_fixed_replicas() -> None:
    values = {
        "reward": {"autoscaling": {"enabled": False}, "replicas": 3},
        "stores": {
            "clickhouseUrl": "http://ch:8123",
            "milvusUri": "http://mv:19530",
            "credentials": {"querySecret": "reader"},
        },
    }
    d = one(render(values), "reward-deployment.yaml")
    c = container(d)
    assert d["spec"]["replicas"] == 3
    assert "--clickhouse-url=http://ch:8123" in c["args"] and "--milvus-uri=http://mv:19530" in c["args"]
    assert _secret_refs(c) == {k: "reader" for k in ENV_KEYS}


def test_reward_service() -> None:
    s = one(render(), "reward-service.yaml")
    assert s["spec"]["ports"][0]["port"] == 8790
    assert s["spec"]["selector"]["app.kubernetes.io/component"] == "reward"


def test_reward_hpa() -> None:
    h = one(render(), "reward-hpa.yaml")
    assert [m["type"] for m in h["spec"]["metrics"]] == ["Resource"]
    prod = one(render(production_values()), "reward-hpa.yaml")
    queue = prod["spec"]["metrics"][1]
    assert queue["pods"]["metric"]["name"] == "reward_queue_depth"
    assert queue["pods"]["target"]["averageValue"] == "1024"
    assert prod["spec"]["maxReplicas"] == 64


def test_reward_pdb() -> None:
    assert one(render(), "reward-pdb.yaml")["spec"]["minAvailable"] == 1
    assert render({"reward": {"pdb": {"enabled": False}}})["reward-pdb.yaml"] == []


def test_reward_servicemonitor() -> None:
    sm = one(render(), "reward-servicemonitor.yaml")
    assert sm["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s"}]


def test_api_deployment() -> None:
    d = one(render(production_values()), "api-deployment.yaml")
    c = container(d)
    assert c["command"] == ["prore", "serve"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert (
        env["PRORE_PLANNER_URL"].endswith("/openai/v1")
        and env["PRORE_PLANNER_MODEL"] == "proretrieval-planner"
    )
    assert {v["name"] for v in d["spec"]["template"]["spec"]["volumes"]} == {"workspace", "tmp"}
    _hardened(d)


def test_api_service() -> None:
    assert one(render(), "api-service.yaml")["spec"]["ports"][0]["port"] == 8080


def test_api_hpa() -> None:
    h = one(render({"api": {"autoscaling": {"maxReplicas": 7}}}), "api-hpa.yaml")
    assert h["spec"]["maxReplicas"] == 7
    assert h["spec"]["scaleTargetRef"]["name"] == "pr-proretrieval-api"


def test_api_ingress() -> None:
    assert render()["api-ingress.yaml"] == []
    i = one(render(production_values()), "api-ingress.yaml")
    assert i["spec"]["ingressClassName"] == "nginx"
    assert i["spec"]["tls"][0]["secretName"] == "search-example-com-tls"
    assert i["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] == "pr-proretrieval-api"


def test_api_pdb() -> None:
    assert one(render(production_values()), "api-pdb.yaml")["spec"]["minAvailable"] == 2


def test_api_servicemonitor() -> None:
    assert render({"api": {"serviceMonitor": {"enabled": False}}})["api-servicemonitor.yaml"] == []
    assert one(render(), "api-servicemonitor.yaml")["spec"]["endpoints"][0]["path"] == "/metrics"


def test_operator_deployment() -> None:
    d = one(render(), "operator-deployment.yaml")
    c = container(d)
    assert c["command"][:3] == ["kopf", "run", "--module=operators.handlers"]
    assert c["args"] == ["--all-namespaces"]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["PRORE_OPERATOR_TRAINING_IMAGE"].endswith("proretrieval-train:0.1.0")
    assert d["spec"]["template"]["spec"]["serviceAccountName"] == "pr-proretrieval-operator"
    _hardened(d)
    scoped = container(one(render(production_values()), "operator-deployment.yaml"))
    assert scoped["args"] == ["--namespace=proretrieval"]


def _operator_env(values: dict[str, Any] | None = None) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(one(render(values), "operator-deployment.yaml"))["env"]}


def _secret_refs(c: dict[str, Any]) -> dict[str, str]:
    """Variable -> the Secret it is read from (each key optional), for a container's env."""
    refs = {}
    for e in c.get("env", []):
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            assert ref["key"] == e["name"] and ref["optional"] is True, e
            refs[e["name"]] = ref["name"]
    return refs


def test_store_credentials__only_from_secrets() -> None:
    """Every component that talks to the stores reads its user and password from its named Secret; no rendered
    object holds a credential as a value, and the planner endpoints' transformers get the query Secret."""
    from operators.promotion import STORE_CREDENTIAL_KEYS
    from operators.settings import OperatorSettings

    assert (
        STORE_CREDENTIAL_KEYS == ENV_KEYS
    )  # the operator repeats the stores' list (it imports no product code)
    production = production_values()
    secrets = production["stores"]["credentials"]
    rendered = render(production)
    for template, secret in (("api-deployment.yaml", secrets["querySecret"]),
                             ("reward-deployment.yaml", secrets["querySecret"]),
                             ("indexing-job.yaml", secrets["indexingSecret"])):  # fmt: skip
        obj = one(rendered, template)
        assert _secret_refs(container(obj)) == {k: secret for k in ENV_KEYS}, template
    assert (
        secrets["querySecret"] != secrets["indexingSecret"]
    )  # the writer's password never reaches a query path
    settings = OperatorSettings.from_env(_operator_env(production))
    assert settings.credentials_secret == secrets["querySecret"]
    # no credential as a plain value anywhere, with the defaults or the production values
    for values in ({}, production):
        for template, docs in render(values).items():
            assert all(d["kind"] != "Secret" for d in docs), template
            text = yaml.safe_dump_all(docs)
            assert not re.search(r"(?i)password\s*[:=]\s*[^\s{]", text.replace("secretKeyRef", "")), template
            for d in docs:
                for c in d.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
                    for e in c.get("env", []):
                        if re.search(r"(PASSWORD|_TOKEN|SECRET_KEY|API_KEY)$", e["name"]):
                            assert "value" not in e, (template, e["name"])
    assert _secret_refs(container(one(render(), "api-deployment.yaml"))) == {}  # none named, none read


def test_operator_deployment__workspace_and_stores() -> None:
    """The operator hands the release's workspace claim and stores to the transformers it creates."""
    from operators.settings import OperatorSettings

    env = _operator_env()
    assert (
        env["PRORE_OPERATOR_WORKSPACE_CLAIM"] == "proretrieval-workspace"
    )  # the claim workspace-pvc.yaml creates
    assert env["PRORE_OPERATOR_CLICKHOUSE_URL"] == env["PRORE_OPERATOR_MILVUS_URI"] == ""  # embedded stores
    assert (
        OperatorSettings.from_env(env).workspace_claim
        == one(render(), "workspace-pvc.yaml")["metadata"]["name"]
    )

    given = {"workspace": {"create": False, "claimName": "shared-workspace"},
             "stores": {"clickhouseUrl": "http://ch:8123", "milvusUri": "http://mv:19530"}}  # fmt: skip
    settings = OperatorSettings.from_env(_operator_env(given))
    assert (settings.workspace_claim, settings.clickhouse_url, settings.milvus_uri) == (
        "shared-workspace",
        "http://ch:8123",
        "http://mv:19530",
    )

    production = production_values()
    settings = OperatorSettings.from_env(_operator_env(production))
    assert settings.clickhouse_url == production["stores"]["clickhouseUrl"]
    assert settings.milvus_uri == production["stores"]["milvusUri"]


def test_operator_rbac() -> None:
    docs = render()["operator-rbac.yaml"]
    assert [d["kind"] for d in docs] == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]
    rules = {
        (g, r): set(rule["verbs"])
        for rule in docs[1]["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert "create" in rules[("ray.io", "rayjobs")]
    assert "patch" in rules[("proretrieval.io", "retrievaltrainingjobs/status")]
    for group, resource in (("serving.kserve.io", "inferenceservices"), ("keda.sh", "scaledobjects"),
                            ("monitoring.coreos.com", "servicemonitors")):  # fmt: skip
        assert "delete" not in rules[(group, resource)]  # owner references delete them
    assert docs[2]["subjects"][0]["namespace"] == "proretrieval"


def test_operator_pdb() -> None:
    assert render()["operator-pdb.yaml"] == []
    assert (
        one(render({"operator": {"pdb": {"enabled": True}}}), "operator-pdb.yaml")["spec"]["maxUnavailable"]
        == 1
    )


def test_operator_servicemonitor() -> None:
    docs = render(production_values())["operator-servicemonitor.yaml"]
    assert [d["kind"] for d in docs] == ["Service", "ServiceMonitor"]


def test_workspace_pvc() -> None:
    pvc = one(render(), "workspace-pvc.yaml")
    assert pvc["metadata"]["name"] == "proretrieval-workspace"
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert render({"workspace": {"create": False}})["workspace-pvc.yaml"] == []


def test_indexing_job() -> None:
    assert render()["indexing-job.yaml"] == []
    job = one(render(production_values()), "indexing-job.yaml")
    c = container(job)
    assert c["command"] == ["prore", "index", "build", "ecommerce", "--no-progress"]
    assert "--clickhouse-url=http://clickhouse-proretrieval.stores.svc:8123" in c["args"]
    assert c["args"][-2:] == ["--index-type", "HNSW"]
    assert job["spec"]["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"] == [2]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    _hardened(job)


def test_api_deployment_configures_prore_serves_planner(monkeypatch: Any) -> None:
    """The API deployment's environment is what ``prore serve`` reads: the planner's URL, model and profile."""
    from prore.cli import build_parser
    from prore.config import load_config
    from serving.commands import api_settings, planner_from_args

    api = {
        **production_values()["api"],
        "plannerProfile": "compact",
        "guidedSamples": 4,
        "plannerOutput": "grammar",
    }
    c = container(one(render({**production_values(), "api": api}), "api-deployment.yaml"))
    env = {e["name"]: e["value"] for e in c["env"] if e["name"].startswith("PRORE_PLANNER_")}
    assert set(env) == {"PRORE_PLANNER_URL", "PRORE_PLANNER_MODEL", "PRORE_PLANNER_PROFILE", "PRORE_PLANNER_OUTPUT",
                        "PRORE_PLANNER_GUIDED_SAMPLES"}  # fmt: skip
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    planner = planner_from_args(build_parser().parse_args(["serve", *c["args"]]), load_config())
    assert planner is not None
    assert (planner.url, planner.model, planner.profile, planner.guided_samples, planner.output) == (
        env["PRORE_PLANNER_URL"], "proretrieval-planner", "compact", 4, "grammar")  # fmt: skip
    default = container(one(render(production_values()), "api-deployment.yaml"))
    assert "PRORE_PLANNER_PROFILE" not in {e["name"] for e in default["env"]}  # unset: prore serve's full
    assert api_settings(build_parser().parse_args(["serve", *default["args"]]), load_config()).fuse == "none"
    fused = container(one(render({**production_values(), "api": {**api, "fuse": "self-query", "fuseGate": "unanimous"}}),
                          "api-deployment.yaml"))  # fmt: skip
    settings = api_settings(build_parser().parse_args(["serve", *fused["args"]]), load_config())
    assert (settings.fuse, settings.fuse_gate) == ("self-query", "unanimous")


def test_the_api_reads_the_planner_card_for_the_familiar_gate(tmp_path: Path, monkeypatch: Any) -> None:
    """``api.plannerCard`` names the model directory on the workspace volume: ``prore serve`` takes its card (the
    prompt profile, and the familiarity gate ``fuseGate: familiar`` needs)."""
    from prore.cli import build_parser
    from prore.config import load_config
    from serving.commands import api_settings, planner_from_args
    from serving.prompt import CARD

    (tmp_path / CARD).write_text(
        json.dumps({"profile": "request", "arch": "minilm-seq2seq", "domains": ["ecommerce"]})
    )
    api = {**production_values()["api"], "plannerCard": str(tmp_path), "guidedSamples": 8, "fuse": "self-query",
           "fuseGate": "familiar"}  # fmt: skip
    c = container(one(render({**production_values(), "api": api}), "api-deployment.yaml"))
    assert f"--planner-card={tmp_path}" in c["args"]
    assert "PRORE_PLANNER_PROFILE" not in {e["name"] for e in c["env"]}, "the card gives the profile"
    for e in c["env"]:
        if e["name"].startswith("PRORE_PLANNER_"):
            monkeypatch.setenv(e["name"], e["value"])
    args = build_parser().parse_args(["serve", *c["args"]])
    planner = planner_from_args(args, load_config())
    assert planner is not None and (planner.card, planner.profile) == (str(tmp_path), "request")
    assert (api_settings(args, load_config()).fuse_gate, planner.guided_samples) == ("familiar", 8)


def test_the_operators_clusterrole_grants_every_call_it_makes() -> None:
    """The closest real check of RBAC without an API server: what the operator asks of the API, derived from its
    code, against the rendered ClusterRole.

    - kopf's own registry, filled by importing the handlers: every resource a handler follows is read, listed
      and watched; kopf patches the objects its changing handlers follow (progress annotations) and their status.
    - ``ApiKube``'s calls, read from its source: get, create and patch of every kind it creates (the examples'
      children and the PlannerService a training job promotes), a status patch of the two custom resources, and a
      read of each core kind in ``CORE_READERS``.
    """
    import ast

    import kopf

    import operators.handlers  # noqa: F401  # registers the handlers with kopf
    from operators.kube import CORE_READERS, PLURALS, split_api_version
    from operators.render import render_documents
    from tests.operators.schemas import REPO

    docs = render()["operator-rbac.yaml"]
    rules = {
        (g, r): set(rule["verbs"])
        for rule in docs[1]["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    needs: set[tuple[str, str, str]] = set()
    registry = kopf.get_default_registry()
    for sub, verbs in ((registry._changing, ("get", "list", "watch", "patch")), (registry._spawning, ("get", "list", "watch", "patch")),
                       (registry._watching, ("get", "list", "watch"))):  # fmt: skip
        for selector in sub.get_all_selectors():
            group, name = selector.group, selector.any_name
            assert isinstance(group, str) and isinstance(name, str), (
                selector
            )  # RBAC rules name exact resources
            needs.update((group, name, verb) for verb in verbs)
            if verbs[-1] == "patch":
                needs.add((group, name + "/status", "patch"))
    source = (REPO / "operators" / "kube.py").read_text()
    called = {node.attr for node in ast.walk(ast.parse(source))
              if isinstance(node, ast.Attribute) and node.attr.endswith(("_custom_object", "_custom_object_status"))}  # fmt: skip
    assert called == {"get_namespaced_custom_object", "create_namespaced_custom_object",
                      "patch_namespaced_custom_object", "patch_namespaced_custom_object_status"}, called  # fmt: skip
    resources = [
        yaml.safe_load((REPO / "examples" / "k8s" / n).read_text())
        for n in ("grpo-ecommerce.yaml", "planner-service.yaml")
    ]
    created = [child for r in resources for child in render_documents(yaml.safe_dump(r))] + [resources[1]]
    for obj in created:
        group, _ = split_api_version(obj["apiVersion"])
        needs.update((group, PLURALS[obj["kind"]], verb) for verb in ("get", "create", "patch"))
    for obj in resources:
        group, _ = split_api_version(obj["apiVersion"])
        needs.update(
            {(group, PLURALS[obj["kind"]], "get"), (group, PLURALS[obj["kind"]] + "/status", "patch")}
        )
    needs.update(("", kind.lower() + "s", "get") for kind in CORE_READERS)
    missing = sorted(n for n in needs if n[2] not in rules.get((n[0], n[1]), set()))
    assert missing == []
    assert {
        ("", "persistentvolumeclaims", "get"),
        ("ray.io", "rayjobs", "create"),
        ("proretrieval.io", "plannerservices", "create"),
        ("serving.kserve.io", "inferenceservices", "watch"),
        ("proretrieval.io", "plannerservices/status", "patch"),
    } <= needs

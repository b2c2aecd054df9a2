#!/usr/bin/env bash
# Installs zabd with its test and pipeline extras, and a headless Java runtime
# for Spark when none is present. Idempotent: quick when all is in place.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v java >/dev/null 2>&1; then
    echo "install: no java found; installing a headless JRE for Spark (apt-get)" >&2
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q openjdk-17-jre-headless
fi
python3 -m pip install -q --disable-pip-version-check -e '.[test,pipeline]'

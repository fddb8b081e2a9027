#!/usr/bin/env bash
# Installs what the test suite and CI need: Debian's zookeeper (real ZooKeeper tests) and
# the package with its test, spark and dev extras (dev: ruff, mypy and import-linter, which
# CI runs).
# editable_mode=compat: an editable install that type checkers see (setuptools' default
# import hook is invisible to mypy). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! dpkg -s zookeeper >/dev/null 2>&1; then
  echo "installing Debian's zookeeper package (needs root)..."
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq zookeeper >/dev/null
fi
python -m pip install -q --disable-pip-version-check -e '.[test,spark,dev]' \
  --config-settings editable_mode=compat

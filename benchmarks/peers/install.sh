#!/usr/bin/env bash
# Installs the peers benchmark's extra dependencies: etcd from Debian, the rest from PyPI.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v etcd > /dev/null; then
    apt-get update
    apt-get install -y etcd-server etcd-client
fi
python -m pip install -r requirements.txt

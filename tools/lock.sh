#!/usr/bin/env bash
# `make lock`: write constraints.txt anew, the one lock of every install (.ci/run, make install,
# ./runtrail-demo). It resolves the newest versions pyproject.toml allows for the dev install
# (every extra) in a scratch venv and pins each package it got; commit the result after the
# suite passes on it. The bench extra is not locked: its quixstreams pins an older
# confluent-kafka, so `make bench` resolves it in a venv of its own.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$PYTHON" -m venv "$scratch/venv"
"$scratch/venv/bin/python" -m pip install -q --disable-pip-version-check uv
"$scratch/venv/bin/uv" pip install -q --python "$scratch/venv/bin/python" -e '.[dev]'
{
    echo "# The lock: every package of runtrail's dev install (all extras), pinned. Used as"
    echo "# constraints by .ci/run, make install and ./runtrail-demo; \`make lock\` writes it anew."
    "$scratch/venv/bin/uv" pip freeze --python "$scratch/venv/bin/python" --exclude-editable \
        | grep -v -i -E '^(runtrail|runtrail-native|pip|setuptools|wheel)([=@ ]|$)'
} > constraints.txt.new
mv constraints.txt.new constraints.txt
echo "constraints.txt: $(grep -c '==' constraints.txt) packages pinned"

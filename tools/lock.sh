#!/usr/bin/env bash
# `make lock`: write the locks anew. Each resolves the newest versions pyproject.toml allows in a
# scratch venv and pins every package it got; commit the result after the suite passes on it.
#   constraints.txt        the dev install (every extra): .ci/run, make install, ./runtrail-demo
#   constraints-bench.txt  the bench extra, for `make bench`: its quixstreams pins an older
#                          confluent-kafka than the dev install's, so it has a venv and lock of
#                          its own (without a lock, pip's resolver took over ten minutes on it)
# `tools/lock.sh dev` or `tools/lock.sh bench` writes one of them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
which=${1:-all}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$PYTHON" -m venv "$scratch/uv"
"$scratch/uv/bin/python" -m pip install -q --disable-pip-version-check uv
uv="$scratch/uv/bin/uv"

# lock EXTRA FILE USED_BY: pin what `pip install -e .[EXTRA]` resolves to
lock() {
    local extra=$1 file=$2 used_by=$3
    "$PYTHON" -m venv "$scratch/$extra"
    "$uv" pip install -q --python "$scratch/$extra/bin/python" -e ".[$extra]"
    {
        echo "# The lock of runtrail's $extra install, every package pinned. Used as"
        echo "# constraints by $used_by; \`make lock\` writes it anew."
        "$uv" pip freeze --python "$scratch/$extra/bin/python" --exclude-editable \
            | grep -v -i -E '^(runtrail|runtrail-native|pip|setuptools|wheel)([=@ ]|$)'
    } > "$file.new"
    mv "$file.new" "$file"
    echo "$file: $(grep -c '==' "$file") packages pinned"
}

if [[ $which == all || $which == dev ]]; then
    lock dev constraints.txt ".ci/run, make install and ./runtrail-demo"
fi
if [[ $which == all || $which == bench ]]; then
    lock bench constraints-bench.txt "make bench"
fi

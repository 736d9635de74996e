#!/usr/bin/env bash
# Re-resolves ci/requirements.lock (the full pinned set) from ci/requirements.txt in a scratch venv.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
python3 -m venv "$scratch/venv"
"$scratch/venv/bin/pip" install -q --upgrade pip
"$scratch/venv/bin/pip" install -q -r "$root/ci/requirements.txt"
{
  echo "# Full resolved set for ci/requirements.txt, used as pip constraints (regenerate: make lock)."
  "$scratch/venv/bin/pip" freeze --exclude-editable | sort -f
} >"$root/ci/requirements.lock"
echo "wrote ci/requirements.lock ($(($(wc -l <"$root/ci/requirements.lock") - 1)) packages)"

#!/usr/bin/env bash
# make generate / make verify-generated: the files in this repo that are written by a program, not by hand.
#
#   ci/generate.sh           rewrite them all: values schema, the chart's train-flag table, chart README, the scenario snapshot suite and
#                            every helm-unittest snapshot, README.md's scenario table
#   ci/generate.sh --check   write nothing; exit 1 naming every generated file that differs from what
#                            its generator writes now (make lint runs this, so make test fails on drift)
#
# The check runs the same generators on a scratch copy of the working tree and compares, so write and
# check can never disagree about what "current" means.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# what generate_in writes (charts/miles/tests: the __snapshot__ folders beside the suites); `make tools`
# puts helm4 and helm-docs on PATH
generated=(
  "charts/miles/values.schema.json"
  "charts/miles/files/train-flags.json"
  "charts/miles/README.md"
  "charts/miles/tests"
  "README.md"
)
generate_in() {
  local tree=$1
  (
    cd "$tree"
    echo "[generate] values.schema.json from values.yaml and the schema constraints"
    "$root/.venv/bin/python" ci/values_schema_gen.py
    echo "[generate] charts/miles/files/train-flags.json (every spelling of the chart's train flags, from the pinned miles parser)"
    # (importing miles warns at length about the GPU libraries a CPU machine lacks: shown only on failure)
    local err; err=$(mktemp)
    "$root/.tools/miles-contract/bin/python" ci/miles-contract/train_flags.py 2>"$err" || { cat "$err" >&2; rm -f "$err"; return 1; }
    rm -f "$err"
    echo "[generate] charts/miles/README.md (helm-docs, from the # -- comments of values.yaml)"
    helm-docs --chart-search-root charts --log-level warning
    echo "[generate] charts/miles/tests/scenarios_test.yaml (every values/ scenario x every template)"
    "$root/.venv/bin/python" ci/scenario_suite.py
    echo "[generate] helm-unittest snapshots (Helm 4)"
    NO_COLOR=1 helm4 unittest --update-snapshot --file 'tests/**/*_test.yaml' charts/miles >/dev/null
    echo "[generate] README.md scenario table (every values/ scenario rendered)"
    "$root/.venv/bin/python" ci/render_scenarios.py --write-readme
  )
}

case ${1:-} in
  "") generate_in "$root" ;;
  --check)
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    # the working tree as it is (tracked and new files, edits included), without tools or git
    git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' path; do
      [[ -e $path ]] && printf '%s\0' "$path"
    done | tar --null -T - -cf - | tar -xf - -C "$scratch"
    ln -s "$root/.tools" "$scratch/.tools"
    generate_in "$scratch" >/dev/null
    # files only: helm-unittest leaves an empty __snapshot__ folder beside every suite it ran, which git
    # neither keeps nor clones
    files_of() { (cd "$1" && find "$2" -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum); }
    stale=()
    for path in "${generated[@]}"; do
      if ! diff <(files_of "$root" "$path") <(files_of "$scratch" "$path") >"$scratch/.diff" 2>&1; then
        stale+=("$path")
        sed 's/^/    /' "$scratch/.diff" >&2
      fi
    done
    if ((${#stale[@]})); then
      echo "generated files are stale: ${stale[*]}" >&2
      echo "run \`make generate\` and commit the result" >&2
      exit 1
    fi
    echo "[generate] every generated file is current: ${generated[*]}"
    ;;
  *)
    echo "usage: ci/generate.sh [--check]; found '$1'" >&2
    exit 2
    ;;
esac

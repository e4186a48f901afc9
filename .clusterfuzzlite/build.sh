#!/usr/bin/env bash
# Builds every cargo-fuzz target of stepcheck into $OUT, the layout ClusterFuzzLite and OSS-Fuzz
# expect: for each target T the binary $OUT/T, its seeds as $OUT/T_seed_corpus.zip and its libFuzzer
# options as $OUT/T.options.
#
# It runs in the builder image (Dockerfile beside it) with the checkout at $SRC/stepcheck, and
# equally outside it: `.ci/run` calls it with SRC and OUT set to temporary folders (SRC holding a
# link to the checkout) and RUSTUP_TOOLCHAIN=nightly, then runs each built target over its seeds.
set -euo pipefail
: "${SRC:?SRC must name the folder that holds the checkout as stepcheck}"
: "${OUT:?OUT must name the folder the targets are written to}"
cd "$SRC/stepcheck"

# The memory limit (MB) each target runs under, as in .ci/run: the readers of sizes (case_file,
# cli_args) get a low one, so that an allocation from an unchecked size fails the run; the others
# keep libFuzzer's default, which `lower`'s largest generated case fits.
rss_limit() {
  case "$1" in
    case_file | cli_args) echo 512 ;;
    *) echo 2048 ;;
  esac
}

# Optimised, with debug assertions and overflow checks on: an overflow in a size computed from a
# header is a bug the targets exist to find. These are the flags `cargo fuzz run` builds with by
# default, so `.ci/run`'s fuzzing reuses this build.
cargo fuzz build -O --debug-assertions
triple="$(rustc -vV | sed -n 's/^host: //p')"
built="fuzz/target/$triple/release"

# zip_seeds ZIP DIR: the files of DIR, flat, as ZIP (with `zip` where it is installed, else Python).
zip_seeds() {
  local zip=$1 dir=$2
  rm -f "$zip"
  if command -v zip >/dev/null 2>&1; then
    zip -q -j "$zip" "$dir"/*
  else
    python3 - "$zip" "$dir" <<'PY'
import os, sys, zipfile
zip_path, folder = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as z:
    for name in sorted(os.listdir(folder)):
        z.write(os.path.join(folder, name), arcname=name)
PY
  fi
}

targets=()
while IFS= read -r target; do targets+=("$target"); done < <(cargo fuzz list)
for target in "${targets[@]}"; do
  cp "$built/$target" "$OUT/"
  if [ -d "fuzz/seeds/$target" ]; then
    zip_seeds "$OUT/${target}_seed_corpus.zip" "fuzz/seeds/$target"
  fi
  cat >"$OUT/$target.options" <<OPTIONS
[libfuzzer]
rss_limit_mb = $(rss_limit "$target")
timeout = 30
OPTIONS
done
echo "built ${#targets[@]} targets into $OUT: ${targets[*]}"

#!/usr/bin/env bash
# Kernel lab (template developers' tool; not part of generated projects). On a machine with copier and nvcc:
#   tests/kernel_lab/run.sh build     renders a project with every op into .gpu/lab/project, compiles each lab
# On the GPU machine (carry .gpu):
#   tests/kernel_lab/run.sh run [quick]   runs each lab (recompiling there if the binary does not start); rms_norm_lab
#   also takes `small` (decode-size launches and per-head rows), `head` (per-head rows only), `bwd` (backward
#   candidates only), `lean` (the leaner backward candidates only), `cluster` (the leaner backward with its
#   weight-gradient sums added up across clusters of 1-8 blocks), `fp32`, `sumrows` (the backward's partial-row sum),
#   `shipped` (the shipped launches at the main shapes: A/B of builds that differ in one -D setting, e.g. compiled
#   by hand with a candidate's -D macro), `graph` (decode-size launches in CUDA-graph replay, as the benchmarks
#   time them), `ncu-bwd` / `ncu-small` (one launch each, for ncu) and `decode` (decode-size launches, 9 of each,
#   interleaved, for ncu's gpu__time_duration; tests/kernel_lab/ncu_table.py makes a table of ncu's CSV, and
#   tests/kernel_lab/liger_decode.py runs Liger's kernels at the same sizes)
# Each lab times the shipped kernels and candidate designs, cold L2, next to a copy of the same bytes.
# A/B of a kernel change (the shipped kernels of two commits, one rms_norm_lab build each):
#   tests/kernel_lab/run.sh build-ab REV   (here, after `build`, which empties .gpu/lab) also builds rms_norm_lab
#                                          on the kernels of REV, into .gpu/lab/old
#   tests/kernel_lab/run.sh ab [MODE]      (GPU) runs MODE (default decode) of both builds under ncu, one after the
#                                          other, caches flushed before every launch, and prints each one's medians
set -euo pipefail
root=$(git rev-parse --show-toplevel 2>/dev/null || pwd)
lab=$root/.gpu/lab
compile_one() {  # DIR SRC: SRC built on the kernels of DIR/project into DIR (ptxas's report beside it)
  local name
  name=$(basename "$2" .cu)
  nvcc -O3 -std=c++17 -arch=sm_90 -lineinfo -Xptxas -v -I "$1/project/kernel_src" "$2" -o "$1/$name" \
    2> "$1/$name.ptxas.txt"
}
compile() {
  for src in "$root"/tests/kernel_lab/*.cu; do compile_one "$lab" "$src"; done
}
case "${1:-}" in
  build)
    rm -rf "$lab" && mkdir -p "$lab"
    python3 -m copier copy -q --trust --defaults --vcs-ref HEAD --data-file "$root/docs/example-answers.yml" \
      "$root" "$lab/project" > /dev/null
    compile
    git -C "$root" describe --always --dirty > "$lab/REV"
    ;;
  build-ab)
    rev=$(git -C "$root" rev-parse "${2:?build-ab REV}")
    rm -rf "$lab/old" && mkdir -p "$lab/old"
    git -C "$root" worktree add -q --detach "$lab/old/tree" "$rev"
    python3 -m copier copy -q --trust --defaults --data-file "$root/docs/example-answers.yml" "$lab/old/tree" \
      "$lab/old/project" > /dev/null
    git -C "$root" worktree remove --force "$lab/old/tree"
    compile_one "$lab/old" "$root/tests/kernel_lab/rms_norm_lab.cu"
    git -C "$root" describe --always "$rev" > "$lab/old/REV"
    ;;
  ab)
    for build in old new; do
      if [ "$build" = old ]; then dir=$lab/old; else dir=$lab; fi
      exe=$dir/rms_norm_lab
      echo "== $build: $(cat "$dir/REV")"
      ncu --csv --metrics gpu__time_duration.sum --cache-control all --clock-control none "$exe" "${2:-decode}" \
        > "$lab/ab-$build.csv"
      grep -v '^"' "$lab/ab-$build.csv" || true  # the lab's own lines: its checks against float64
      python3 "$root/tests/kernel_lab/ncu_table.py" "$lab/ab-$build.csv" "$build"
    done
    ;;
  run)
    for exe in "$lab"/*_lab; do "$exe" --version > /dev/null 2>&1 || { compile; break; }; done
    for exe in "$lab"/*_lab; do "$exe" "${@:2}" || echo "$exe failed: $?"; done
    ;;
  *) echo "usage: $0 build|run [MODE]|build-ab REV|ab [MODE]" >&2; exit 2 ;;
esac

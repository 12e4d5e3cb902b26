#!/usr/bin/env bash
# compute-sanitizer over the tests marked `sanitize` (the template's ops, forward and backward, at odd, misaligned
# and strided sizes; ops from tools/new_op.py have none until you add them), once per tool: memcheck (out-of-bounds and misaligned accesses), racecheck (shared-memory races), synccheck
# (barrier misuse), initcheck (reads of never-written global memory). Prints one line per tool and exits 1 when a
# tool reports an error or a test fails. Logs: build/sanitize/<tool>.log.
#
#   bash tools/sanitize.sh [TOOL...]      (default: memcheck racecheck synccheck initcheck)
#
# memcheck, racecheck and synccheck check only this project's kernels (they live in namespace ckt: --kernel-name
# kns=ckt); torch's own run unchecked (SANITIZE_KERNELS=all checks them too). initcheck checks every kernel: the
# writes of kernels it leaves out are not tracked, so the inputs torch's kernels fill would all read as never
# written (on an H200, filtered: 1.4 million false reports; unfiltered: 0 errors in 11 s). torch's caching allocator
# is off, so that each tensor is an allocation of its own: memcheck then sees an access past a tensor's end, and
# initcheck a read of memory that no one wrote. CUDA API errors are left to torch and the bindings, which raise
# them (--report-api-errors no).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(memcheck racecheck synccheck initcheck)
command -v compute-sanitizer > /dev/null || {
  echo "compute-sanitizer not found: put the CUDA toolkit's bin/ on PATH" >&2
  exit 2
}
filter=(--kernel-name kns=ckt)
[ "${SANITIZE_KERNELS:-}" != all ] || filter=()
mkdir -p build/sanitize
failed=0
for tool in "${tools[@]}"; do
  case $tool in
    memcheck | racecheck | synccheck | initcheck) ;;
    *)
      echo "unknown tool '$tool': choose from memcheck racecheck synccheck initcheck" >&2
      exit 2
      ;;
  esac
  log=build/sanitize/$tool.log
  only=("${filter[@]}")
  [ "$tool" != initcheck ] || only=()
  start=$SECONDS
  REQUIRE_GPU=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool "$tool" --error-exitcode 1 \
    --report-api-errors no "${only[@]}" python -m pytest tests -m sanitize -q -p no:cacheprovider > "$log" 2>&1
  rc=$?
  report=$(grep -E "(ERROR|RACECHECK) SUMMARY" "$log" | tail -n 1 | sed -E 's/^=+ *//')
  tests=$(grep -E " in [0-9.]+s" "$log" | tail -n 1 | tr -d '=' | sed -E 's/^ +| +$//g')
  if [ "$rc" -eq 0 ]; then verdict=ok; else verdict="FAILED (exit status $rc)" && failed=1; fi
  echo "$tool: $verdict; ${report:-no sanitizer summary}; pytest: ${tests:-no result}; $((SECONDS - start)) s; $log"
done
exit "$failed"

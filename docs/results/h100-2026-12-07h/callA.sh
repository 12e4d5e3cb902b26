#!/usr/bin/env bash
# Call A: Quack's first part stashed for call B; the wheels into /root/site; the project (main's kernels) built in
# /root/proj; its tests; compute-sanitizer memcheck, racecheck and synccheck.
set -uo pipefail
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
mkdir -p /root/stash && cp .peersA/part_aa /root/stash/ || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /root/site .whl/*.whl || exit 1
export PYTHONPATH=/root/site PYTHONUNBUFFERED=1 MAX_JOBS=16
export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
rm -rf /root/proj && cp -r .gpu/projects/all /root/proj && cd /root/proj
P=/root/proj
el build; { time python3 setup.py build_kernel; } > $OUT/build.log 2>&1; el "build rc=$? $(grep real $OUT/build.log)"
export LOCAL_KERNELS="my-org/ltx-kernels=$P"
el tests; timeout 220 python3 -m pytest tests -n 16 -q --maxfail=20 -p no:cacheprovider > $OUT/tests.log 2>&1; el "rc=$? $(tail -1 $OUT/tests.log)"
el sanitize; timeout 150 bash tools/sanitize.sh memcheck racecheck synccheck > $OUT/sanitize.txt 2>&1; el "rc=$?"; cp build/sanitize/*.log $OUT/ 2>/dev/null
el done
grep -E "passed|failed|error" $OUT/tests.log | tail -5; tail -8 $OUT/sanitize.txt
tar -czf /tmp/o.tgz -C $OUT . && find $OUT -mindepth 1 -delete && mv /tmp/o.tgz $OUT/out.tgz

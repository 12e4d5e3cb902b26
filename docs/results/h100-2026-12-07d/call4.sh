#!/usr/bin/env bash
# The spin sweep in run_case, then bench.py (QUEUE_CYCLES 20_000_000) on decode-size RMSNorm cases.
set -uo pipefail
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /root/site .whl/*.whl || exit 1
export PYTHONPATH=/root/site PYTHONUNBUFFERED=1 MAX_JOBS=16
export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
rm -rf /root/lab && cp -r tests/kernel_lab /root/lab
P=/root/proj; rm -rf $P; cp -r .gpu/projects/all $P; cd $P
el build; { time python3 setup.py build_kernel; } > $OUT/build.log 2>&1; el "build rc=$? $(grep real $OUT/build.log)"
export LOCAL_KERNELS="my-org/ltx-kernels=$P"
cd /root/lab
el sweep; timeout 90 python3 bench_bisect.py $P sweep > $OUT/sweep.txt 2>&1; el "rc=$?"
cd $P; grep -n "^QUEUE_CYCLES" benchmarks/timing.py
el bench; timeout -s INT 80 python3 benchmarks/bench.py --ops rmsnorm --dtypes bf16 --modes forward --no-plot --keep-going --shapes hidden.8x4096,hidden.32x4096,hidden.128x4096,hidden.512x4096,hidden.1024x4096 --out $OUT/bench > $OUT/bench.log 2>&1; el "rc=$?"
el done
grep -v "Warning\|warn" $OUT/sweep.txt | cut -c1-260 | tail -12
grep "4096 | bf16" $OUT/bench/results.md | cut -d'|' -f3,5,6,11 | head -30
tar -czf /tmp/o.tgz -C $OUT . && find $OUT -mindepth 1 -delete && mv /tmp/o.tgz $OUT/out.tgz

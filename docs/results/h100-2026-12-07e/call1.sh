#!/usr/bin/env bash
# Call 1: Quack's first part stashed; build; bench_bisect (sequential: plain, keep-cache, no-compile; interleaved);
# bench.py (GpuTimer.each: implementations interleaved) on RMSNorm forward decode shapes with Liger and torch.compile.
set -uo pipefail
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
mkdir -p /root/stash && cp .peersA/part_aa /root/stash/ || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /root/site .whl/*.whl || exit 1
export PYTHONPATH=/root/site PYTHONUNBUFFERED=1 MAX_JOBS=16
export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
rm -rf /root/proj /root/lab && cp -r .gpu/projects/all /root/proj && cp -r tests/kernel_lab /root/lab
P=/root/proj; cd $P
el build; { time python3 setup.py build_kernel; } > $OUT/build.log 2>&1; el "build rc=$? $(grep real $OUT/build.log)"
export LOCAL_KERNELS="my-org/ltx-kernels=$P"
cd /root/lab
for opts in "sequential" "sequential keep-cache" "sequential no-compile" "interleaved"; do
  f=$OUT/bisect-${opts// /-}.txt
  el "bisect $opts"; timeout 100 python3 bench_bisect.py $P $opts > $f 2>&1; el "rc=$?"
done
cd $P
S=hidden.1x4096,hidden.8x4096,hidden.32x4096,hidden.128x4096,hidden.512x4096,hidden.1024x4096,q_norm.128x32x128,k_norm.128x8x128,hidden.8192x4096
el bench; timeout -s INT 150 python3 benchmarks/bench.py --ops rmsnorm --dtypes bf16 --modes forward --no-plot --keep-going --shapes $S --out $OUT/bench-decode > $OUT/bench-decode.log 2>&1; el "rc=$?"
el done
for f in $OUT/bisect-*.txt; do echo "== $f"; grep -v "Warning\|warn\|processes on" $f | cut -c1-230 | tail -14; done
echo "== bench"; grep "\*\*ours\*\*" $OUT/bench-decode/results.md | cut -d'|' -f2,3,6,8,11 | head -30
tar -czf /tmp/o.tgz -C $OUT . && find $OUT -mindepth 1 -delete && mv /tmp/o.tgz $OUT/out.tgz

#!/usr/bin/env bash
set -uo pipefail
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
root=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /root/site .whl/*.whl || exit 1
export PYTHONPATH=/root/site PYTHONUNBUFFERED=1 MAX_JOBS=16
export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
nvidia-smi --query-gpu=name --format=csv,noheader
if [ ! -d /root/proj/build ]; then
  rm -rf /root/proj /root/lab && cp -r .gpu/projects/all /root/proj && cp -r tests/kernel_lab /root/lab
  cd /root/proj; el build; { time python3 setup.py build_kernel; } > $OUT/build.log 2>&1; el "build rc=$?"
fi
P=/root/proj; export LOCAL_KERNELS="my-org/ltx-kernels=$P"
cd $root
el probe; timeout 200 python3 .gpu/probe.py $P 2>&1 | tee $OUT/probe.txt | grep -v Warning; el done
cd $P
el bench; timeout -s INT 100 python3 benchmarks/bench.py --ops rmsnorm --dtypes bf16 --modes forward --no-plot --keep-going --shapes hidden.32x4096,hidden.128x4096,hidden.512x4096 --out $OUT/bench > $OUT/bench.log 2>&1; el "rc=$?"
grep "32x4096\|128x4096\|512x4096" $OUT/bench/results.md | cut -d'|' -f3,5,6 

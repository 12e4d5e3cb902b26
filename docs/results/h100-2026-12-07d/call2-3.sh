#!/usr/bin/env bash
# Bisect bench.py's slow decode-size GPU times: build, then bench_bisect.py plain and with copy + rich.
set -uo pipefail
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /root/site .whl/*.whl || exit 1
export PYTHONPATH=/root/site PYTHONUNBUFFERED=1 MAX_JOBS=16
export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
rm -rf /root/lab && cp -r tests/kernel_lab /root/lab
root=$PWD; P=/root/proj
[ -d $P/build ] || { rm -rf $P; cp -r .gpu/projects/all $P; cd $P; el build; { time python3 setup.py build_kernel; } > $OUT/build.log 2>&1; el "build rc=$? $(grep real $OUT/build.log)"; }
export LOCAL_KERNELS="my-org/ltx-kernels=$P"
cd /root/lab
el plain; timeout 200 python3 bench_bisect.py $P > $OUT/bisect-plain.txt 2>&1; el "rc=$?"
el copy-rich; timeout 160 python3 bench_bisect.py $P copy rich import > $OUT/bisect-copy-rich.txt 2>&1; el "rc=$?"
el done
for f in $OUT/bisect-*.txt; do echo "== $f"; grep -v "Warning\|warn" $f | cut -c1-200 | tail -30; done
tar -czf /tmp/o.tgz -C $OUT . && find $OUT -mindepth 1 -delete && mv /tmp/o.tgz $OUT/out.tgz

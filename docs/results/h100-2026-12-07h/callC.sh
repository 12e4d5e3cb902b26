#!/usr/bin/env bash
# Call C (right after call B, or alone): the fp16 and fp32 quick cases with Liger and torch.compile (no Quack:
# diffusers takes its room); e2e.py LTX with the control. Builds the project again when /root/proj is gone.
set -uo pipefail
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /root/siteC .whl/*.whl .whlD/*.whl || exit 1
[ -d /root/peers/liger ] && echo "liger from call B" || echo "no liger"
export PYTHONPATH=/root/siteC:/root/peers/liger PYTHONUNBUFFERED=1 MAX_JOBS=16
export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
P=/root/proj
[ -d $P/build ] || { rm -rf $P; cp -r .gpu/projects/all $P; cd $P; el build; { time python3 setup.py build_kernel; } > $OUT/build.log 2>&1; el "build rc=$? $(grep real $OUT/build.log)"; }
export LOCAL_KERNELS="my-org/ltx-kernels=$P"
cd $P
el e2e; timeout -s INT 200 python3 benchmarks/e2e.py --models ltx --control --out $OUT/e2e > $OUT/e2e.log 2>&1; el "rc=$?"
el quick; timeout -s INT 250 python3 benchmarks/bench.py --quick --dtypes fp16,fp32 --keep-going --out $OUT/bench-quick > $OUT/bench-quick.log 2>&1; el "rc=$?"
el done
tail -15 $OUT/e2e.log; echo "== quick"; grep "\*\*ours\*\*" $OUT/bench-quick/results.md | cut -d'|' -f2,3,6,8,11 | head -60
tar -czf /tmp/o.tgz -C $OUT . && find $OUT -mindepth 1 -delete && mv /tmp/o.tgz $OUT/out.tgz

#!/usr/bin/env bash
# Call E: the project (bench.py's host times in interleaved rounds) built; bench.py on the tiny (host-timed) cases
# of every op with Liger and torch.compile.
set -uo pipefail
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /root/site .whl/*.whl .whlD/liger*.whl || exit 1
export PYTHONPATH=/root/site PYTHONUNBUFFERED=1 MAX_JOBS=16
export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
rm -rf /root/proj && cp -r .gpu/projects/all /root/proj && cd /root/proj
el build; { time python3 setup.py build_kernel; } > $OUT/build.log 2>&1; el "build rc=$? $(grep real $OUT/build.log)"
export LOCAL_KERNELS="my-org/ltx-kernels=/root/proj"
S=qwen3-8b.hidden.1x4096,ltx-2b.norm1.1x1x2048,qwen3-8b.add_norm.1x4096,ltx-2b.attn1.1x1x2048,ltx-2b-sized.1x16384,ltx-2b.norm1-modulated.1x1x2048
el bench; timeout -s INT 110 python3 benchmarks/bench.py --dtypes bf16 --keep-going --no-plot --shapes $S --out $OUT/bench-host > $OUT/bench-host.log 2>&1; el "rc=$?"
sed -n '/^## host time/,$p' $OUT/bench-host/results.md | grep -v "| eager |" | cut -d'|' -f2,3,6,7,8,9 | head -70
tar -czf /tmp/o.tgz -C $OUT . && find $OUT -mindepth 1 -delete && mv /tmp/o.tgz $OUT/out.tgz

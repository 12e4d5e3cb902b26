#!/usr/bin/env bash
# Call 2 (right after call 1): Quack unpacked; every op's bf16 cases (forward and train) with Liger, Quack and
# torch.compile, GPU times interleaved; host_times.py; e2e.py LTX with the control.
set -uo pipefail
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
[ -f /root/stash/part_aa ] || echo "NO STASH: Quack's first part is gone (a fresh machine)"
mkdir -p /root/peers && cat /root/stash/part_aa .peersB/part_ab | tar -xzf - -C /root/peers && echo quack unpacked
[ -d /root/site/kernels ] || echo "NO SITE"
export PYTHONPATH=/root/site:/root/peers/site:/root/peers/site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1 MAX_JOBS=16
export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "import quack, liger_kernel; print('quack', quack.__version__ if hasattr(quack, '__version__') else '?')" 2>&1 | tail -1
P=/root/proj
[ -d $P/build ] || { rm -rf $P /root/lab; cp -r .gpu/projects/all $P; cp -r tests/kernel_lab /root/lab; cd $P; el build; { time python3 setup.py build_kernel; } > $OUT/build.log 2>&1; el "build rc=$? $(grep real $OUT/build.log)"; }
export LOCAL_KERNELS="my-org/ltx-kernels=$P"
cd $P
el bench; timeout -s INT 280 python3 benchmarks/bench.py --dtypes bf16 --keep-going --out $OUT/bench-bf16 > $OUT/bench-bf16.log 2>&1; el "rc=$?"
el host; timeout 40 python3 /root/lab/host_times.py > $OUT/host-times.txt 2>&1; el "rc=$?"
el e2e; timeout -s INT 150 python3 benchmarks/e2e.py --models ltx --control --out $OUT/e2e > $OUT/e2e.log 2>&1; el "rc=$?"
el done
echo "== bench"; grep "\*\*ours\*\*" $OUT/bench-bf16/results.md | cut -d'|' -f2,3,6,8,11 | head -80
tail -12 $OUT/host-times.txt; tail -15 $OUT/e2e.log
tar -czf /tmp/o.tgz -C $OUT . && find $OUT -mindepth 1 -delete && mv /tmp/o.tgz $OUT/out.tgz

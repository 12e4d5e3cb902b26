#!/usr/bin/env bash
# Call B (right after call A): Quack unpacked; every op's bf16 cases (forward and train) with Liger, Quack and
# torch.compile, GPU times interleaved (HEAD's kernels); host_times.py; e2e.py LTX with the control.
set -uo pipefail
R=$PWD
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
[ -f /root/stash/part_aa ] || echo "NO STASH: Quack's first part is gone (a fresh machine)"
mkdir -p /root/peers && cat /root/stash/part_aa .peersB/part_ab | tar -xzf - -C /root/peers && echo quack unpacked
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /root/peers/liger .peersB/*.whl && echo liger installed
[ -d /root/site/kernels ] || echo "NO SITE"
export PYTHONPATH=/root/site:/root/peers/liger:/root/peers/site:/root/peers/site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1 MAX_JOBS=16
export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "import quack, liger_kernel; print('quack and liger import')" 2>&1 | tail -1
P=/root/proj
[ -d $P/build ] || { rm -rf $P; cp -r .gpu/projects/all $P; cd $P; el build; { time python3 setup.py build_kernel; } > $OUT/build.log 2>&1; el "build rc=$? $(grep real $OUT/build.log)"; }
export LOCAL_KERNELS="my-org/ltx-kernels=$P"
cd $P
el bench; timeout -s INT 330 python3 benchmarks/bench.py --dtypes bf16 --keep-going --out $OUT/bench-bf16 > $OUT/bench-bf16.log 2>&1; el "rc=$?"
el host; timeout 45 python3 $R/tests/kernel_lab/host_times.py > $OUT/host-times.txt 2>&1; el "rc=$?"
echo "e2e: call C (diffusers does not fit beside Quack in 64 MiB)"
el bisect; cd $R/tests/kernel_lab && timeout 100 python3 bench_bisect.py $P graph > $OUT/bisect-graph.txt 2>&1; el "rc=$?"; cd $P
el done
echo "== bench"; grep "\*\*ours\*\*" $OUT/bench-bf16/results.md | cut -d'|' -f2,3,6,8,11 | head -90
grep "ours" $OUT/host-times.txt | head -20; grep -v "Warning\|warn\|processes on" $OUT/bisect-graph.txt | cut -c1-200 | tail -30
tar -czf /tmp/o.tgz -C $OUT . && find $OUT -mindepth 1 -delete && mv /tmp/o.tgz $OUT/out.tgz

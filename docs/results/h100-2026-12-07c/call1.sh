#!/usr/bin/env bash
# Call 1: Quack's first part stashed; the project built in /root/proj; decode_profiler's flush states; bench.py's
# RMSNorm and AdaLN cases with the queued flush (Liger, torch.compile); on an H200 the full tests and compute-sanitizer.
set -uo pipefail
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
root=$PWD
mkdir -p /root/stash && cp .peersA/part_aa /root/stash/ || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /root/site .whl/*.whl || exit 1
export PYTHONPATH=/root/site PYTHONUNBUFFERED=1 MAX_JOBS=16
export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
rm -rf /root/proj && cp -r .gpu/projects/all /root/proj && cp -r tests/kernel_lab /root/lab
P=/root/proj; cd $P
el build; { time python3 setup.py build_kernel; } > $OUT/build.log 2>&1; el "build rc=$? $(grep real $OUT/build.log)"
export LOCAL_KERNELS="my-org/ltx-kernels=$P"
cd /root/lab
el profiler-states; timeout 150 python3 decode_profiler.py $P/torch-ext ltx_kernels bench,queued,gap 1,8,32,128,512,1024,2048 > $OUT/decode-profiler.txt 2>&1; el "rc=$?"
cd $P
el bench-rms; timeout -s INT 200 python3 benchmarks/bench.py --dtypes bf16 --ops rmsnorm,adaln --keep-going --no-plot --out $OUT/bench-rms > $OUT/bench-rms.log 2>&1; el "rc=$?"
if grep -q H200 $OUT/gpu.txt; then
  cd $P
  el tests; timeout 200 python3 -m pytest tests -n 16 -q -p no:cacheprovider > $OUT/tests.log 2>&1; el "tests rc=$? $(tail -1 $OUT/tests.log)"
  el sanitize; timeout 150 bash tools/sanitize.sh memcheck racecheck > $OUT/sanitize.txt 2>&1; el "sanitize rc=$?"; cat $OUT/sanitize.txt | tail -3
fi
el done
echo "== profiler states"; grep "^|" $OUT/decode-profiler.txt | tail -45
echo "== bench"; grep "\*\*ours\*\*" $OUT/bench-rms/results.md | cut -d'|' -f2,3,6,8,11 | head -60
tar -czf /tmp/o.tgz -C $OUT . && find $OUT -mindepth 1 -delete && mv /tmp/o.tgz $OUT/out.tgz

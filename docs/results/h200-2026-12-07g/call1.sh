#!/usr/bin/env bash
# Call 1: the RMSNorm backward's weight-gradient sum in the same (cooperative) launch. Build the project (in the
# background) while the kernel lab times the old (HEAD) and new shipped backward, alternating, then ncu on both;
# the project's tests; bench.py forward+backward cases with torch.compile and Liger; host times.
set -uo pipefail
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /root/site .whl/*.whl || exit 1
export PYTHONPATH=/root/site PYTHONUNBUFFERED=1 MAX_JOBS=16
export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
R=$PWD; L=$R/.gpu/lab
rm -rf /root/proj && cp -r .gpu/projects/all /root/proj
P=/root/proj
( cd $P && { time python3 setup.py build_kernel; } > $OUT/build.log 2>&1; echo "build rc=$?" >> $OUT/build.log ) &
BUILD=$!
el lab
for i in 1 2; do
  $L/old/rms_norm_lab shipped > $OUT/lab-shipped-old-$i.txt 2>&1
  $L/rms_norm_lab shipped > $OUT/lab-shipped-new-$i.txt 2>&1
done
el ncu
for b in old new; do
  exe=$L/rms_norm_lab; [ $b = old ] && exe=$L/old/rms_norm_lab
  timeout 120 ncu --section SpeedOfLight --section Occupancy --kernel-name regex:"rms_norm_backward|sum_rows" $exe ncu-bwd > $OUT/ncu-bwd-$b.txt 2>&1
  el "ncu $b rc=$?"
done
wait $BUILD; el "$(tail -1 $OUT/build.log) $(grep real $OUT/build.log)"
export LOCAL_KERNELS="my-org/ltx-kernels=$P"
cd $P
el tests; timeout 200 python3 -m pytest tests -n 16 -q --maxfail=20 -p no:cacheprovider > $OUT/tests.log 2>&1; el "rc=$? $(tail -1 $OUT/tests.log)"
S=hidden.8192x4096,q_norm.8192x32x128,k_norm-rows,add_norm.8192x4096
el bench; timeout -s INT 150 python3 benchmarks/bench.py --ops rmsnorm --dtypes bf16 --modes train --no-plot --keep-going --shapes $S --out $OUT/bench-train > $OUT/bench-train.log 2>&1; el "rc=$?"
el host; timeout 60 python3 $R/tests/kernel_lab/host_times.py > $OUT/host-times.txt 2>&1; el "rc=$?"
el parts; timeout 60 python3 $R/.gpu/host_parts.py > $OUT/host-parts.txt 2>&1; el "rc=$?"
el sanitize; timeout 150 bash tools/sanitize.sh memcheck racecheck synccheck > $OUT/sanitize.txt 2>&1; el "rc=$?"; cp build/sanitize/*.log $OUT/ 2>/dev/null
el done
for f in $OUT/lab-shipped-*.txt; do echo "== $f"; grep "bwd" $f; done
for b in old new; do echo "== ncu $b"; grep -E "rms_norm_backward_kernel|sum_rows_kernel|^    Duration|DRAM Throughput" $OUT/ncu-bwd-$b.txt | sed 's/(ckt::RmsNormBackwardArgs)//' | cut -c1-150; done
grep -E "passed|failed|error" $OUT/tests.log | tail -5; cat $OUT/sanitize.txt
echo "== bench"; grep "qwen3" $OUT/bench-train/results.md | cut -d"|" -f3,5,6,8,11 | head -40
grep -i "rmsnorm\|F.rms" $OUT/host-times.txt | head -20; head -20 $OUT/host-parts.txt
tar -czf /tmp/o.tgz -C $OUT . && find $OUT -mindepth 1 -delete && mv /tmp/o.tgz $OUT/out.tgz

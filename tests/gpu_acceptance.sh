#!/usr/bin/env bash
# The GPU acceptance run, made through the device tool on an H200 (see docs/gpu-runs.md for commands and results).
# Input (carried into the run): .gpu/projects/<case>/ (projects rendered on the CPU machine with `copier copy`)
# and .whl/ (wheels the GPU image lacks: kernels, tomlkit, diffusers, importlib_metadata, liger-kernel).
# For each project: build with setup.py, load through kernels.get_local_kernel and kernels.get_kernel (offline via
# LOCAL_KERNELS), run its tests; then run the benchmark suite of the project named by BENCH (if any), and the
# multi-GPU training check of the project named by TRAIN (if any) on all the machine's GPUs. PACK=1 packs what it
# wrote under $OUT into $OUT/out.tgz at the end (the device tool returns at most 8 files from $OUT).
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16}
export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, triton, transformers, diffusers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__, 'diffusers', diffusers.__version__)"

projects=(.gpu/projects/*/)
for p in "${projects[@]}"; do  # rendered projects travel with their repository renamed (nested repositories
  [ -d "$p/.git-saved" ] && mv "$p/.git-saved" "$p/.git"  # inside the template's tree confuse copier)
done
for p in "${projects[@]}"; do
  name=$(basename "$p")
  (cd "$p" && { time python3 setup.py build_kernel; } > "/tmp/build-$name.log" 2>&1; echo "build $name: rc=$? $(grep real "/tmp/build-$name.log")") &
done
wait
tail -n 30 /tmp/build-*.log > "$OUT/builds.log"

summary=()
for p in "${projects[@]}"; do
  name=$(basename "$p")
  repo=$(sed -n 's/^repo-id = "\(.*\)"/\1/p' "$p/build.toml")
  version=$(sed -n 's/^version = \([0-9]*\)/\1/p' "$p/build.toml")
  (
    cd "$p" || exit 1
    python3 -c "import pathlib, kernels; k = kernels.get_local_kernel(pathlib.Path('build')); print('get_local_kernel:', k.__name__, k.__all__)" &&
    LOCAL_KERNELS="$repo=$PWD" python3 -c "import kernels; k = kernels.get_kernel('$repo', version=$version); print('get_kernel($repo, version=$version):', k.__name__)" &&
    REQUIRE_GPU=1 LOCAL_KERNELS="$repo=$PWD" timeout ${TEST_TIMEOUT:-300} python3 -m pytest tests -q -rs -p no:cacheprovider ${PYTEST_ARGS:--s} 2>&1 | tee "$OUT/tests-$name.log" | grep -E "passed|failed|error|ulp|FAILED|Error" | tail -40
  )
  summary+=("$name: $(tail -1 "$OUT/tests-$name.log")")
done

if [ -n "${BENCH:-}" ]; then
  (cd ".gpu/projects/$BENCH" && LOCAL_KERNELS="$(sed -n 's/^repo-id = "\(.*\)"/\1/p' build.toml)=$PWD" \
    timeout ${BENCH_TIMEOUT:-400} python3 benchmarks/bench.py --out "$OUT/bench" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | tail -150)
fi
if [ -n "${TRAIN:-}" ]; then  # the project's benchmarks/multi_gpu_train.py on every GPU of the machine (1 is fine)
  (cd ".gpu/projects/$TRAIN" && LOCAL_KERNELS="$(sed -n 's/^repo-id = "\(.*\)"/\1/p' build.toml)=$PWD" \
    timeout "${TRAIN_TIMEOUT:-400}" python3 -m torch.distributed.run --standalone --nproc-per-node "$(nvidia-smi -L | wc -l)" \
    benchmarks/multi_gpu_train.py 2>&1 | tee "$OUT/train.log" | tail -80)
fi
printf '%s\n' "${summary[@]}"
if [ "${PACK:-0}" = 1 ]; then
  tar -czf /tmp/gpu-out.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv /tmp/gpu-out.tgz "$OUT/out.tgz"
fi

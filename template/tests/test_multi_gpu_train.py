"""benchmarks/multi_gpu_train.py under torchrun on 2 GPUs: DDP (Qwen3, kernelize), FSDP2 (LTX-Video,
patch_diffusers) and a row-sharded DTensor train or compute the same with the kernels as without (the script's
docstring says what it checks). Skipped on a machine with fewer GPUs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .multi_gpu import two_gpus

ROOT = Path(__file__).resolve().parent.parent


@two_gpus
def test_training_on_two_gpus(kernel):  # `kernel`: the build must load in this process first
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    result = subprocess.run(
        [*command, "benchmarks/multi_gpu_train.py"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    print(result.stdout)
    assert result.returncode == 0, f"exit status {result.returncode}:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    ran = [line for line in result.stdout.splitlines() if line == "OK"]
    if not ran:
        skipped = [line for line in result.stdout.splitlines() if ": skipped: " in line]
        pytest.skip("; ".join(skipped) or "nothing ran")

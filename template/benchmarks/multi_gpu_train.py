"""Training on several GPUs with this kernel's ops: the same losses as without them.

    torchrun --nproc-per-node 2 benchmarks/multi_gpu_train.py       # DDP, FSDP2 and DTensor checks on 2 GPUs
    torchrun --nproc-per-node 1 benchmarks/multi_gpu_train.py       # the same on one GPU
    torchrun --nproc-per-node 2 benchmarks/multi_gpu_train.py --models ltx --steps 10
    torchrun --nproc-per-node 2 benchmarks/multi_gpu_train.py --build build/   # the staged build

Small models, random init (nothing is downloaded), each process on its own GPU (LOCAL_RANK) with its own synthetic
batch (fixed seeds), trained --steps AdamW steps in --dtype (default bf16) twice from the same initial weights:
without the kernels, then with them.
- qwen3 (needs the rmsnorm op, transformers and kernels): transformers' Qwen3ForCausalLM (tests/test_models.py's
  small config), every Qwen3RMSNorm swapped for this kernel's layers.RMSNorm by kernels.kernelize, wrapped in
  DistributedDataParallel.
- ltx (needs rmsnorm, adaln or rope3d, and diffusers): diffusers' LTXVideoTransformer3DModel (tests/test_models.py's
  small config), patched with patch_diffusers, then each transformer block and the whole model sharded with FSDP2
  (torch.distributed.fsdp.fully_shard). Patch before sharding: fully_shard changes the modules' classes.
- dtensor (needs rmsnorm): rms_norm on a DTensor sharded along the rows (sequence parallel) must refuse (no sharding
  strategy is registered for the ops), and through torch.distributed.tensor.experimental.local_map give, forward and
  backward, what the kernel gives on the whole tensor (docs/multi-gpu.md).
A model whose op this project lacks is skipped, and so is one whose library is not installed; either way it says so.

Rank 0 prints, per model, the losses (mean over the processes) of every step without and with the kernels and their
relative difference. Exit status 1 when a difference exceeds tests/test_models.py's tolerance for training (twice
its RELATIVE), when a loss is not finite, when the model did not learn (last loss not below the first), or when a
dtensor check fails.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
from bench import COMPILED_DTYPES, DTYPES, load_kernel, optional
from torch import nn

# tests/test_models.py: ||patched - original|| / ||original|| for whole models; training losses get twice this.
RELATIVE = {torch.bfloat16: 2e-2, torch.float16: 4e-3, torch.float32: 1e-4}
MODELS = ["qwen3", "ltx", "dtensor"]
NEEDS_OPS = {"qwen3": ["rms_norm"], "ltx": ["rms_norm", "adaln", "rope3d"], "dtensor": ["rms_norm"]}  # any of them
NEEDS_LIBRARIES = {"qwen3": ["transformers", "kernels"], "ltx": ["diffusers"], "dtensor": []}


class LoadedLayer:
    """A kernels layer repository for an already loaded kernel (kernelize only needs `load()`)."""

    def __init__(self, layer: type[nn.Module]):
        self.layer = layer

    def load(self) -> type[nn.Module]:
        return self.layer


class Run:
    """One model's two trainings: how to build it (the same weights every call), put the kernels in, wrap it for
    several GPUs, and the loss of the process's batch."""

    def __init__(self, build: Callable[[], nn.Module], patch: Callable[[nn.Module], None], wrap, loss_of, what: str):
        self.build, self.patch, self.wrap, self.loss_of, self.what = build, patch, wrap, loss_of, what


def qwen3(kernel, dtype: torch.dtype, device: torch.device, rank: int) -> Run:
    import kernels
    import transformers
    from torch.nn.parallel import DistributedDataParallel

    def build() -> nn.Module:
        config = transformers.Qwen3Config(
            vocab_size=512,
            hidden_size=256,
            intermediate_size=512,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=64,
            rms_norm_eps=1e-6,
        )
        torch.manual_seed(0)
        model = transformers.Qwen3ForCausalLM(config).to(device=device, dtype=dtype)
        for module in model.modules():  # random norm weights, so that a weight ignored or misapplied shows
            if type(module).__name__ == "Qwen3RMSNorm":
                nn.init.normal_(module.weight, 1.0, 0.2)
        return model

    def patch(model: nn.Module) -> None:
        norm_class = type(model.model.norm)  # transformers marks it only with the kernels versions it supports
        if not hasattr(norm_class, "kernel_layer_name"):
            kernels.replace_kernel_forward_from_hub(norm_class, "RMSNorm")
        mapping = {"RMSNorm": {"cuda": LoadedLayer(kernel.layers.RMSNorm)}}
        with kernels.use_kernel_mapping(mapping, inherit_mapping=False):
            kernels.kernelize(model, mode=kernels.Mode.TRAINING, device="cuda", use_fallback=False)
        swapped = sum(m.forward.__func__ is kernel.layers.RMSNorm.forward for m in model.modules())
        assert swapped == 2 * 4 + 1, f"kernelize swapped {swapped} Qwen3RMSNorm, expected 9"

    generator = torch.Generator(device).manual_seed(1000 + rank)
    ids = torch.randint(0, 512, (2, 48), device=device, generator=generator)

    def loss_of(model: nn.Module) -> torch.Tensor:
        return model(input_ids=ids, labels=ids).loss * ids.numel()  # summed: fp16 gradients stay normal numbers

    def wrap(model: nn.Module) -> nn.Module:
        return DistributedDataParallel(model, device_ids=[device.index])

    return Run(build, patch, wrap, loss_of, "Qwen3ForCausalLM, kernelize (layers.RMSNorm), DDP")


def ltx(kernel, dtype: torch.dtype, device: torch.device, rank: int) -> Run:
    import diffusers
    from torch.distributed.fsdp import fully_shard

    def build() -> nn.Module:
        torch.manual_seed(0)
        model = diffusers.LTXVideoTransformer3DModel(
            in_channels=16,
            out_channels=16,
            num_attention_heads=4,
            attention_head_dim=32,
            cross_attention_dim=128,
            num_layers=2,
            caption_channels=64,
        ).to(device=device, dtype=dtype)
        for name, p in model.named_parameters():  # the zero-initialized modulation tables would hide AdaLN errors
            if "scale_shift_table" in name or "norm_q" in name or "norm_k" in name:
                nn.init.normal_(p, 0.5, 0.3)
        return model

    def patch(model: nn.Module) -> None:
        counts = kernel.patch_diffusers(model)
        assert counts, "patch_diffusers patched nothing"

    def wrap(model: nn.Module) -> nn.Module:
        for block in model.transformer_blocks:
            fully_shard(block)
        fully_shard(model)
        return model

    generator = torch.Generator(device).manual_seed(2000 + rank)
    batch, frames, height, width = 2, 3, 4, 6
    inputs = dict(
        hidden_states=torch.randn(batch, frames * height * width, 16, device=device, generator=generator).to(dtype),
        encoder_hidden_states=torch.randn(batch, 8, 64, device=device, generator=generator).to(dtype),
        timestep=torch.randint(0, 1000, (batch,), device=device, generator=generator),
        encoder_attention_mask=torch.ones(batch, 8, dtype=dtype, device=device),
        num_frames=frames,
        height=height,
        width=width,
        rope_interpolation_scale=(8 / 25, 32, 32),
        return_dict=False,
    )

    def loss_of(model: nn.Module) -> torch.Tensor:
        return model(**inputs)[0].float().pow(2).sum()  # a sum keeps fp16 gradients out of the subnormal range

    return Run(build, patch, wrap, loss_of, "LTXVideoTransformer3DModel, patch_diffusers, FSDP2 (fully_shard)")


def train(run: Run, with_kernels: bool, steps: int) -> list[float]:
    """Losses of `steps` AdamW steps, each the mean over the processes (tests/test_models.py's optimizer settings:
    eps=1e-3 because the parameters themselves are in the tested dtype)."""
    model = run.build()
    if with_kernels:
        run.patch(model)
    model = run.wrap(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-3)
    losses = []
    for _ in range(steps):
        loss = run.loss_of(model)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        mean = loss.detach().float().reshape(1)
        dist.all_reduce(mean)
        losses.append(mean.item() / dist.get_world_size())
    return losses


def compare_training(run: Run, steps: int, dtype: torch.dtype) -> tuple[list[str], list[str]]:
    """The table of the two trainings' losses, and what is wrong with them (nothing: an empty list)."""
    expected, actual = train(run, False, steps), train(run, True, steps)
    limit = 2 * RELATIVE[dtype]
    lines = [f"{'step':>4}  {'without kernels':>16}  {'with kernels':>16}  {'rel. diff':>9}"]
    problems = []
    for step, (e, a) in enumerate(zip(expected, actual)):
        diff = abs(a - e) / abs(e) if e else abs(a - e)
        lines.append(f"{step:>4}  {e:>16.6g}  {a:>16.6g}  {diff:>9.2e}")
        if not (math.isfinite(a) and math.isfinite(e)):
            problems.append(f"step {step}: a loss is not finite ({e} without, {a} with the kernels)")
        elif diff > limit:
            problems.append(f"step {step}: losses differ by {diff:.2e} (relative), more than {limit:.0e}")
    if not expected[-1] < expected[0]:
        problems.append(f"the model did not learn without the kernels ({expected[0]:.6g} -> {expected[-1]:.6g})")
    return lines, problems


def dtensor(kernel, dtype: torch.dtype, device: torch.device) -> tuple[list[str], list[str]]:
    """rms_norm of a row-sharded DTensor: refused when called directly, right through local_map."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.experimental import local_map

    world = dist.get_world_size()
    mesh = init_device_mesh(device.type, (world,))
    generator = torch.Generator(device).manual_seed(3000)  # the same whole tensors on every process
    x, dy = (torch.randn(64 * world, 1024, device=device, generator=generator).to(dtype) for _ in range(2))
    weight = (1 + 0.2 * torch.randn(1024, device=device, generator=generator)).to(dtype)
    lines, problems = [], []

    x_d = distribute_tensor(x, mesh, [Shard(0)]).requires_grad_()
    w_d = distribute_tensor(weight, mesh, [Replicate()]).requires_grad_()
    try:
        kernel.rms_norm(x_d, w_d, 1e-6)
        problems.append("rms_norm accepted a DTensor although no sharding strategy is registered for its op")
    except Exception as error:  # NotImplementedError: "Operator ... does not have a sharding strategy registered."
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        lines.append(f"direct call on a DTensor: {type(error).__name__}: {message[:110]}")
        if "sharding strategy" not in message:
            problems.append(f"the direct call failed otherwise than for want of a sharding strategy: {message[:200]}")

    norm = local_map(
        kernel.rms_norm,
        out_placements=[Shard(0)],
        in_placements=([Shard(0)], [Replicate()], None),
        in_grad_placements=([Shard(0)], [Partial()], None),  # each process's weight gradient is a partial sum
    )
    y_d = norm(x_d, w_d, 1e-6)
    y_d.backward(distribute_tensor(dy, mesh, [Shard(0)]))
    x_ref, w_ref = x.clone().requires_grad_(), weight.clone().requires_grad_()
    y_ref = kernel.rms_norm(x_ref, w_ref, 1e-6)
    y_ref.backward(dy)
    # Fewer rows per launch may spread a row over more threads (another summation order), and the weight gradient's
    # partial sums are added in another order: a few ulps, against the errors of a wrong placement (factors of 2).
    for what, got, want in [
        ("output", y_d.full_tensor(), y_ref),
        ("input gradient", x_d.grad.full_tensor(), x_ref.grad),
        (f"weight gradient ({w_d.grad.placements[0]})", w_d.grad.full_tensor(), w_ref.grad),
    ]:
        error = ((got.double() - want.double()).norm() / want.double().norm()).item()
        lines.append(f"local_map: {what}: relative error {error:.2e}")
        if not error <= RELATIVE[dtype]:
            problems.append(f"local_map: the {what} differs by {error:.2e} (relative), more than {RELATIVE[dtype]}")
    return lines, problems


def skip_reason(model: str, kernel) -> str | None:
    ops = NEEDS_OPS[model]
    if not any(hasattr(kernel, op) for op in ops):
        return f"this project has none of the ops it needs ({', '.join(ops)})"
    missing = [name for name in NEEDS_LIBRARIES[model] if optional(name) is None]
    if missing:
        return f"{', '.join(missing)} not installed (requirements/models.txt, requirements/test.txt)"
    return None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    def names(text: str) -> list[str]:
        return [part.strip() for part in text.split(",") if part.strip()]

    default_dtype = "bf16" if "bf16" in COMPILED_DTYPES else COMPILED_DTYPES[0]
    parser = argparse.ArgumentParser(
        description="Train small models with and without this kernel's ops on several GPUs (run it with torchrun) "
        "and compare the losses.",
        epilog="The module docstring of this file says what each model checks.",
    )
    parser.add_argument("--models", type=names, default=MODELS, help=f"comma-separated subset of {','.join(MODELS)}")
    parser.add_argument("--steps", type=int, default=5, help="AdamW steps per training (default 5)")
    parser.add_argument("--dtype", choices=COMPILED_DTYPES, default=default_dtype, help="parameters' and inputs' dtype")
    parser.add_argument("--build", type=Path, help="a staged build folder (kernels.get_local_kernel)")
    args = parser.parse_args(argv)
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        parser.error(f"--models: {', '.join(unknown)} not in {','.join(MODELS)}")
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the check needs a model that learns)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if "LOCAL_RANK" not in os.environ:
        sys.exit(
            "multi_gpu_train.py: start it with torchrun: torchrun --nproc-per-node 2 benchmarks/multi_gpu_train.py"
        )
    local_rank = int(os.environ["LOCAL_RANK"])
    if local_rank >= torch.cuda.device_count():
        sys.exit(f"multi_gpu_train.py: process {local_rank} has no GPU of its own ({torch.cuda.device_count()} GPUs)")
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = DTYPES[args.dtype]
    kernel, how = load_kernel(args.build)

    def say(*lines: str) -> None:
        if rank == 0:
            print(*lines, sep="\n", flush=True)

    say(f"{world} process(es), {torch.cuda.get_device_name(device)}, {args.dtype}, kernel: {how}")
    failures: list[str] = []
    builders: dict[str, Any] = {"qwen3": qwen3, "ltx": ltx}
    for model in args.models:
        reason = skip_reason(model, kernel)
        if reason:
            say(f"\n{model}: skipped: {reason}")
            continue
        if model == "dtensor":
            say(f"\ndtensor: rms_norm on rows sharded over {world} GPU(s)")
            lines, problems = dtensor(kernel, dtype, device)
        else:
            run = builders[model](kernel, dtype, device, rank)
            say(f"\n{model}: {run.what}, {world} GPU(s), {args.steps} steps")
            lines, problems = compare_training(run, args.steps, dtype)
        say(*lines, *([f"FAILED: {p}" for p in problems] or ["OK"]))
        failures += [f"{model}: {p}" for p in problems]
    dist.destroy_process_group()
    if failures:
        say(f"\n{len(failures)} failure(s); first: {failures[0]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

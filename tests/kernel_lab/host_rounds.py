"""Host time per call of several callables, measured in interleaved rounds: each round runs every callable CALLS
times in turn (in the order `order(round)` gives), so that drift over the run (clocks, other processes, compile
workers left by an earlier torch.compile) favours none. Shared by host_times.py, host_parts.py and host_backward.py
(template developers' tools). The generated project's benchmarks/timing.py host_us runs the same kind of rounds
for one case; these add a grad mode per callable, any order per round and every round's figure (for the spread)."""

import gc
import random
import time
from collections.abc import Callable, Hashable, Iterable, Sequence

import torch


def host_rounds(
    calls: dict[Hashable, tuple[Callable[[], object], bool]],
    rounds: int,
    per_round: int,
    warmup: int,
    order: Callable[[int], Sequence[Hashable]],
) -> tuple[dict[Hashable, list[float]], dict[Hashable, float]]:
    """calls: {key: (call, grad mode)}. Returns ({key: µs per call, one figure per round}, {key: the largest share of
    a round's wall time spent waiting for the GPU after the last call was issued}: above ~0.1 the GPU, not the host,
    set the pace)."""
    for call, grad_mode in calls.values():
        with torch.set_grad_enabled(grad_mode):
            for _ in range(warmup):
                call()
    torch.cuda.synchronize()
    times = {key: [] for key in calls}
    waited = dict.fromkeys(calls, 0.0)
    gc.disable()
    try:
        for round_ in range(rounds):
            for key in order(round_):
                call, grad_mode = calls[key]
                with torch.set_grad_enabled(grad_mode):
                    start = time.perf_counter()
                    for _ in range(per_round):
                        call()
                    issued = time.perf_counter()
                    torch.cuda.synchronize()
                    end = time.perf_counter()
                times[key].append((end - start) / per_round * 1e6)
                waited[key] = max(waited[key], (end - issued) / (end - start))
    finally:
        gc.enable()
    return times, waited


def shuffled(keys: Iterable[Hashable], seed: int = 0) -> Callable[[int], list]:
    """An `order` for host_rounds: each round every key once, in a new random order from a generator seeded with
    `seed` (so that two runs take the same orders)."""
    rng, keys = random.Random(seed), list(keys)

    def order(_round: int) -> list:
        this_round = list(keys)  # from the same starting order each round
        rng.shuffle(this_round)
        return this_round

    return order

"""Static cost of a kernel change, on a machine without a GPU: compiles one kernel source of two rendered projects
(before and after) for one capability with the flags torch builds use, and prints, for every kernel whose SASS
changed, its instruction count (NOPs left out) and its registers and spill stores as ptxas reports them. A count is
not a time: it says where to look, and the GPU says what it is worth. Template developers' tool:

    python3 tests/kernel_lab/sass_counts.py OLD_PROJECT NEW_PROJECT kernel_src/rms_norm.cu [REGEX] [--arch 90]

(REGEX keeps the kernels whose mangled names match it.) cuobjdump comes from CUDA_HOME/bin, else from triton's
bundled copy.
"""

import argparse
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

FLAGS = [
    "-std=c++17",
    "-O3",
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "-Xptxas",
    "-v",
]
# A kernel's mangled name without the per-compilation hash of its anonymous namespace.
HASHED = re.compile(r"\d+_GLOBAL__N__[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]{8}")


def tool(name: str) -> str:
    home = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    if (home / "bin" / name).is_file():
        return str(home / "bin" / name)
    import triton  # its wheel carries cuobjdump and nvdisasm

    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
    if bundled.is_file():
        return str(bundled)
    found = shutil.which(name)
    if not found:
        raise SystemExit(f"error: no {name} in CUDA_HOME/bin, triton's wheel or PATH")
    return found


def compile_counts(project: Path, source: str, arch: str, out: Path) -> dict:
    """{kernel: (instructions, registers, spill store bytes)} of one compile."""
    cubin = out / "k.cubin"
    args = [tool("nvcc"), *FLAGS, f"-arch=sm_{arch}", "-cubin", "-I", str(project / "kernel_src")]
    args += [str(project / source), "-o", str(cubin)]
    report = subprocess.run(args, capture_output=True, text=True, check=True).stderr
    usage, name, spill = {}, None, 0
    for line in report.splitlines():
        if m := re.search(r"Compiling entry function '(\S+)'", line):
            name, spill = HASHED.sub("", m.group(1)), 0
        elif (m := re.search(r"(\d+) bytes spill stores", line)) and name:
            spill = int(m.group(1))
        elif (m := re.search(r"Used (\d+) registers", line)) and name:
            usage[name] = (int(m.group(1)), spill)
            name = None
    sass = subprocess.run([tool("cuobjdump"), "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    counts = {}
    for function in re.split(r"\n\s*Function : ", sass)[1:]:
        header, body = function.split("\n", 1)
        ops = re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", body)
        kernel = HASHED.sub("", header.strip())
        counts[kernel] = (sum(op != "NOP" for op in ops), *usage.get(kernel, (None, None)))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("source")
    parser.add_argument("regex", nargs="?", default=".")
    parser.add_argument("--arch", default="90")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(2) as pool:
        dirs = [Path(tmp, "old"), Path(tmp, "new")]
        for d in dirs:
            d.mkdir()
        old, new = pool.map(compile_counts, (args.old, args.new), (args.source,) * 2, (args.arch,) * 2, dirs)
    changed = [k for k in sorted(old.keys() | new.keys()) if re.search(args.regex, k) and old.get(k) != new.get(k)]
    print(f"sm_{args.arch} {args.source}: instructions, registers, spill stores (bytes), before -> after")
    for k in changed:
        (a, ra, sa), (b, rb, sb) = old.get(k, (None,) * 3), new.get(k, (None,) * 3)
        print(f"{k}  {a} -> {b}  regs {ra} -> {rb}  spills {sa} -> {sb}")
    kept = [k for k in old if re.search(args.regex, k)]
    print(f"{len(changed)} of {len(kept)} kernels changed")


if __name__ == "__main__":
    main()

"""Add an op of your own to this project: its six files from a working skeleton, and its registrations.

    python tools/new_op.py NAME      # in the project's root; NAME: lowercase snake_case, e.g. swiglu

The skeleton is a complete elementwise op, NAME(x) -> y with y = x * sigmoid(x) (SiLU), forward and backward, that
builds, passes its tests and benchmarks as it is; change its math where it says TODO(math). It writes
    kernel_src/NAME.cu, kernel_src/NAME.h          CUDA kernels and their launch function (no torch headers)
    torch-ext/NAME.cpp                             checks, device guard, stream, launch; register_NAME(ops)
    torch-ext/<package>/NAME.py                    Python wrapper, register_fake, register_autograd
    tests/test_NAME.py                             values and gradients against a float64 reference
    benchmarks/cases/NAME.py                       benchmark shapes and the eager baseline
and registers the op below the "Your own ops" comments of build.toml (its binding in [torch] src and a
[kernel.NAME] section, with the cuda-capabilities of the first [kernel.*] section), torch-ext/torch_binding.h,
torch-ext/torch_binding.cpp and torch-ext/<package>/__init__.py, where `copier update` keeps them.
The ops it defines: NAME(Tensor! out, Tensor x) -> (), NAME_fwd(Tensor x) -> Tensor and
NAME_bwd(Tensor grad_out, Tensor x) -> Tensor; Python: <package>.NAME(x, *, out=None).

The skeletons are tools/op_skeleton/*.tmpl (string.Template: $op, $Op (CamelCase), $OP, $package).
"""

from __future__ import annotations

import keyword
import re
import string
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

SKELETON = Path(__file__).resolve().parent / "op_skeleton"
NAME = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")
MAX_LENGTH = 32  # every line of the skeletons stays within 120 columns
# The template's own ops (copier.yml's ops.yml): `copier update` may add them to this project later.
TEMPLATE_STEMS = {"rms_norm", "rope3d", "geglu", "adaln"}
CPP_KEYWORDS = set(
    "alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class "
    "compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype "
    "default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline "
    "int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public register "
    "reinterpret_cast requires return short signed sizeof static static_assert static_cast struct switch template "
    "this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t "
    "while xor xor_eq".split()
)
# Names the generated files already use for something else (namespaces, modules, imports).
TAKEN = {"at", "c10", "checks", "ckt", "cuda", "main", "math", "memcpy", "ops", "pytest", "std", "torch"}

# Marked places: (file, marker text, where the new lines go). "before_close" inserts them before the first line
# after the marker that starts with `close`; "end" appends them to the file.
BUILD_SRC_MARKER = "# Bindings of your own ops"
BUILD_KERNEL_MARKER = "# Your own ops' [kernel.<op>] sections go below"
HEADER_MARKER = "// Your own ops"
BINDING_MARKER = "// Your own ops"
INIT_MARKER = "# Your own ops (tools/new_op.py adds them below"
HELPERS = ["config.h", "dispatch.cuh", "vec.cuh", "reduce.cuh", "launch.cuh"]  # when build.toml lists none


class Refused(Exception):
    """A one-line reason not to write anything."""


def camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def check_name(name: str) -> None:
    if not NAME.fullmatch(name):
        raise Refused(f"{name!r} is not a lowercase snake_case identifier (letters, digits, underscores), e.g. swiglu")
    if len(name) > MAX_LENGTH:
        raise Refused(f"{name!r} is longer than {MAX_LENGTH} characters")
    if keyword.iskeyword(name) or name in CPP_KEYWORDS or name in TAKEN:
        raise Refused(f"{name!r} is a reserved word or a name the project already uses; choose another")


def insert_before_close(text: str, marker: str, close: str, lines: list[str], where: str) -> str:
    """`lines` at the end of the region that starts at the line holding `marker` and ends before the next line
    starting with `close`."""
    rows = text.splitlines(keepends=True)
    start = next((i for i, row in enumerate(rows) if marker in row), None)
    if start is None:
        raise Refused(f"{where} has no {marker!r} comment; put it back (see the template) and run this again")
    end = next((i for i in range(start + 1, len(rows)) if rows[i].strip().startswith(close)), None)
    if end is None:
        raise Refused(f"{where}: no {close!r} after the {marker!r} comment")
    return "".join(rows[:end] + [line + "\n" for line in lines] + rows[end:])


def append_after(text: str, marker: str, lines: list[str], where: str) -> str:
    """`lines` at the end of the file, whose last region starts at `marker`."""
    if marker not in text:
        raise Refused(f"{where} has no {marker!r} comment; put it back (see the template) and run this again")
    return text.rstrip("\n") + "\n" + "".join(line + "\n" for line in lines)


def toml_list(values: list[str]) -> str:
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


def plan(root: Path, name: str) -> tuple[dict[Path, str], dict[Path, str]]:
    """(files to create, files to change) -> their new text; Refused when anything is missing or taken."""
    build_toml = root / "build.toml"
    if not build_toml.is_file() or not (root / "torch-ext" / "torch_binding.cpp").is_file():
        raise Refused("run this in the root of a generated project (the folder with build.toml and torch-ext/)")
    text = {path: path.read_text() for path in [build_toml]}
    try:
        config = tomllib.loads(text[build_toml])
    except tomllib.TOMLDecodeError as error:
        raise Refused(f"build.toml does not parse: {error}") from None
    package = config.get("general", {}).get("name", "").replace("-", "_")
    package_dir = root / "torch-ext" / package
    if not package or not (package_dir / "__init__.py").is_file():
        raise Refused(f"no torch-ext/{package or '<package>'}/__init__.py for build.toml's [general] name")
    header, binding, init = (
        root / "torch-ext" / "torch_binding.h",
        root / "torch-ext" / "torch_binding.cpp",
        package_dir / "__init__.py",
    )
    for path in [header, binding, init]:
        if not path.is_file():
            raise Refused(f"{path.relative_to(root)} is missing")
        text[path] = path.read_text()

    created = {
        root / "kernel_src" / f"{name}.cu": "kernel.cu.tmpl",
        root / "kernel_src" / f"{name}.h": "kernel.h.tmpl",
        root / "torch-ext" / f"{name}.cpp": "binding.cpp.tmpl",
        package_dir / f"{name}.py": "wrapper.py.tmpl",
        root / "tests" / f"test_{name}.py": "test.py.tmpl",
        root / "benchmarks" / "cases" / f"{name}.py": "bench_case.py.tmpl",
    }
    exists = [str(path.relative_to(root)) for path in created if path.exists()]
    if (root / "torch-ext" / f"{name}.h").exists():  # "<name>.h" would be ambiguous on the include path
        exists.append(f"torch-ext/{name}.h")
    kernels = config.get("kernel", {})
    if name in kernels:
        exists.append(f"[kernel.{name}] in build.toml")
    if re.search(rf"\bregister_{name}\b", text[header] + text[binding]):
        exists.append(f"register_{name} in torch-ext/torch_binding.*")
    exported = set(re.findall(r"[A-Za-z_]\w*", " ".join(re.findall(r"^from \.\w* import (.+)$", text[init], re.M))))
    exported |= set(re.findall(r"[\"'](\w+)[\"']", " ".join(re.findall(r"__all__.*$", text[init], re.M))))
    if name in exported:
        exists.append(f"{name} in torch-ext/{package}/__init__.py")
    defined = {
        op for cpp in (root / "torch-ext").glob("*.cpp") for op in re.findall(r"def\(\"(\w+)\(", cpp.read_text())
    }
    exists += [f"op {op} in torch-ext/" for op in (name, f"{name}_fwd", f"{name}_bwd") if op in defined]
    if exists:
        raise Refused(f"{name} already exists: {', '.join(exists[:3])}{', ...' if len(exists) > 3 else ''}")
    if name in TEMPLATE_STEMS:  # not chosen for this project, but a later `copier update` could add it
        raise Refused(
            f"{name!r} is one of the template's ops; add it with `copier update --trust --data 'ops=[...]'` "
            "or choose another name"
        )

    first = next(iter(kernels.values()), None)
    if first is None or not first.get("cuda-capabilities"):
        raise Refused("build.toml has no [kernel.*] section with cuda-capabilities to copy")
    first_stem = next(iter(kernels))
    helpers = [s for s in first.get("src", []) if s.endswith((".h", ".cuh")) and Path(s).stem != first_stem]
    helpers = helpers or [f"kernel_src/{h}" for h in HELPERS]
    sources = [*helpers, f"kernel_src/{name}.cu", f"kernel_src/{name}.h"]

    changed = {
        build_toml: append_after(
            insert_before_close(text[build_toml], BUILD_SRC_MARKER, "]", [f'  "torch-ext/{name}.cpp",'], "build.toml"),
            BUILD_KERNEL_MARKER,
            [
                "",
                f"[kernel.{name}]",
                'backend = "cuda"',
                'depends = ["torch"]',
                f"cuda-capabilities = {toml_list(first['cuda-capabilities'])}",
                "src = [",
                *[f'  "{s}",' for s in sources],
                "]",
            ],
            "build.toml",
        ),
        header: append_after(
            text[header], HEADER_MARKER, [f"void register_{name}(torch::Library& ops);"], "torch_binding.h"
        ),
        binding: insert_before_close(
            text[binding], BINDING_MARKER, "}", [f"  register_{name}(ops);"], "torch_binding.cpp"
        ),
        init: append_after(
            text[init],
            INIT_MARKER,
            ["", f"from .{name} import {name}  # noqa: E402", "", f'__all__ += ["{name}"]'],
            f"torch-ext/{package}/__init__.py",
        ),
    }
    try:
        tomllib.loads(changed[build_toml])
    except tomllib.TOMLDecodeError as error:
        raise Refused(f"build.toml would not parse after the edit ({error}); check its own-ops region") from None

    values = {"op": name, "Op": camel(name), "OP": name.upper(), "package": package}
    files = {
        path: string.Template((SKELETON / skeleton).read_text()).substitute(values)
        for path, skeleton in created.items()
    }
    return files, changed


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if len(argv) != 1:
        print("error: usage: python tools/new_op.py NAME (in the project's root; NAME e.g. swiglu)", file=sys.stderr)
        return 2
    name, root = argv[0], Path.cwd()
    try:
        check_name(name)
        files, changed = plan(root, name)
    except Refused as reason:
        print(f"error: {reason}", file=sys.stderr)
        return 2
    for path, content in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    for path, content in changed.items():
        path.write_text(content)

    def rel(path: Path) -> str:
        return path.relative_to(root).as_posix()

    print(f"Added the op {name}: a working skeleton that computes SiLU, y = x * sigmoid(x).")
    print("Created:")
    for path in files:
        print(f"  {rel(path)}")
    print("Changed:")
    for path in changed:
        print(f"  {rel(path)}")
    print("Fill in (marked TODO(math)):")
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "TODO(math):" in line:
                print(f"  {rel(path)}:{number}: {line.split('TODO(math):', 1)[1].strip()}")
    print(f"  - the kernel's math: {name}_math and {name}_grad in kernel_src/{name}.cu")
    print(f"  - the test's float64 reference: reference() in tests/test_{name}.py")
    print(
        f"Then: git add -A (kernel-builder sees only tracked files), build, run python -m pytest tests/test_{name}.py"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

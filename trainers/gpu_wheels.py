"""Wheels for ragteam's embedded path on a GPU machine that has no package index but already has
torch and transformers (a CUDA image): fetched here, carried over as one folder, installed there
offline.

    make gpu-wheels [WHEELS=wheels/gpu]              # or:
    python trainers/gpu_wheels.py --dest DIR [--python-version 3.12] [--torch-version 2.9.1] [--dry-run]

What it does, on a machine with the package index:
1. builds DeepSpeed as a wheel with no compiled ops (``DS_BUILD_OPS=0``: PyPI ships it as a source
   archive only, and its ops JIT-build on first use on the GPU machine, as they do here);
2. resolves the packages below plus DeepSpeed's requirements for the GPU machine's Python and
   platform (``pip install --dry-run --report``: metadata only, nothing large is fetched), with
   torch and transformers in the request so every pin agrees with them;
3. keeps what those packages need, less torch and everything torch pulls in (the GPU machine
   has them; transformers' own dependencies change between its releases, so one the packages
   need too is carried anyway), and downloads it as binary wheels for that platform;
4. prints the folder's size and the command that installs it there without an index.

``--dry-run`` prints the plan (packages, pins, pip commands) and touches nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if not __package__:  # run as a script of a checkout by any python3: stores.owned needs only the stdlib
    sys.path.insert(0, str(ROOT))
from ragteam.stores.owned import GPU_WHEELS, ForeignPathError, check_owned, claim  # noqa: E402
# What the embedded path imports beyond torch/transformers (chromadb only for dense indexes,
# sentence-transformers only to build one: neither is here).
PACKAGES = ("langgraph", "langchain-core", "pydantic", "bm25s", "PyStemmer", "gguf", "graphviz", "hjson",
            "liger-kernel")
DEEPSPEED = "deepspeed"
ALREADY_THERE = ("torch", "transformers")  # with their whole dependency closure
# what a CUDA torch brings on Linux, whichever torch build the resolver saw here (a CPU build has none)
CUDA_TORCH_BRINGS = ("triton", "nvidia-")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64")


try:
    from packaging.requirements import Requirement
except ImportError:  # a bare python3: pip carries its own copy
    from pip._vendor.packaging.requirements import Requirement


def canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def pinned_in_pyproject(names) -> dict[str, str]:
    """The version ranges ragteam's pyproject gives these packages (base, train and gpu)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        return {}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in ("train", "gpu"):
        requirements += project.get("optional-dependencies", {}).get(extra, [])
    wanted = {canonical(n) for n in names}
    found = {}
    for requirement in requirements:
        parsed = Requirement(requirement)
        if canonical(parsed.name) in wanted:
            found[canonical(parsed.name)] = str(parsed.specifier)
    return found


def requirement_list(names, ranges: dict[str, str]) -> list[str]:
    return [f"{n}{ranges.get(canonical(n), '')}" for n in names]


def target_flags(args) -> list[str]:
    flags = ["--only-binary=:all:", "--python-version", args.python_version]
    for platform in args.platform or PLATFORMS:
        flags += ["--platform", platform]
    return flags


def pip(*arguments: str, env: dict | None = None, capture: bool = False) -> str:
    command = [sys.executable, "-m", "pip", *arguments]
    done = subprocess.run(command, env={**os.environ, **(env or {})}, check=True, text=True,
                          stdout=subprocess.PIPE if capture else None)
    return done.stdout if capture else ""


def build_deepspeed(spec: str, dest: Path) -> Path:
    """DeepSpeed as a pure-Python wheel (no ops compiled: they build on first use)."""
    before = set(dest.glob("deepspeed-*.whl"))
    pip("wheel", "--no-deps", "--no-binary", DEEPSPEED, "--wheel-dir", str(dest), spec,
        env={"DS_BUILD_OPS": "0"})
    built = sorted(set(dest.glob("deepspeed-*.whl")) - before) or sorted(dest.glob("deepspeed-*.whl"))
    return built[-1]


def wheel_requirements(wheel: Path) -> list[str]:
    """A wheel's unconditional ``Requires-Dist`` lines (its extras left out)."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode().splitlines()
    return [line.split(":", 1)[1].strip() for line in lines
            if line.startswith("Requires-Dist:") and "extra ==" not in line]


def resolve(requirements: list[str], args) -> list[dict]:
    """pip's resolution for the target (metadata only): [{name, version, requires}]."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        pip("install", "--dry-run", "--quiet", "--ignore-installed", "--target", str(Path(scratch) / "t"),
            "--report", str(report), *target_flags(args), *requirements)
        installs = json.loads(report.read_text())["install"]
    return [{"name": canonical(i["metadata"]["name"]), "version": i["metadata"]["version"],
             "requires": i["metadata"].get("requires_dist") or []} for i in installs]


def applies(requirement: Requirement, python_version: str) -> bool:
    """A requirement outside any extra whose marker holds for the target Python (on Linux)."""
    if requirement.marker is None:
        return True
    try:
        return requirement.marker.evaluate({"extra": "", "python_version": python_version,
                                            "python_full_version": f"{python_version}.0"})
    except Exception:  # noqa: BLE001 — a marker we cannot judge: count it in
        return True


def closure(packages: list[dict], roots, python_version: str) -> set[str]:
    """Names reachable from ``roots`` through the resolved packages' requirements (extras not
    followed: an extra of transformers is not on the GPU machine for being possible)."""
    graph = {}
    for p in packages:
        parsed = [Requirement(r) for r in p["requires"]]
        graph[p["name"]] = {canonical(r.name) for r in parsed if applies(r, python_version)}
    seen, todo = set(), [canonical(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen or name not in graph:
            continue
        seen.add(name)
        todo += graph[name]
    return seen


def folder_size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.glob("*.whl"))


def install_command(dest: Path) -> str:
    names = " ".join([*PACKAGES, DEEPSPEED])
    return f"pip install --no-index --find-links {shlex.quote(str(dest))} {names}"


def print_plan(args: argparse.Namespace, packages: list[str], present: list[str]) -> None:
    """What ``--dry-run`` prints: the packages, what is left out, and the three pip steps."""
    deepspeed = packages[-1]
    print(f"packages: {' '.join(packages)}")
    print(f"left out (already on the GPU machine): {' '.join(present)}, torch's dependencies, "
          f"{', '.join(n + ('*' if n.endswith('-') else '') for n in CUDA_TORCH_BRINGS)}")
    print(f"target: Python {args.python_version}, {' '.join(args.platform or PLATFORMS)}")
    print(f"1. DS_BUILD_OPS=0 pip wheel --no-deps --no-binary {DEEPSPEED} --wheel-dir {args.dest} '{deepspeed}'")
    print(f"2. pip install --dry-run --ignore-installed --report R {' '.join(target_flags(args))} "
          f"{' '.join(packages[:-1])} <deepspeed's requirements> {' '.join(present)}")
    print(f"3. pip download --no-deps {' '.join(target_flags(args))} --dest {args.dest} <each resolved pin "
          f"these packages need, less torch's own dependencies>")
    print(f"then, on the GPU machine: {install_command(args.dest)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dest", type=Path, default=ROOT / ".cache" / "gpu-wheels", help="the folder to fill")
    parser.add_argument("--python-version", default=f"{sys.version_info.major}.{sys.version_info.minor}",
                        help="the GPU machine's Python (default: this one's)")
    parser.add_argument("--platform", action="append", help=f"wheel platform tags (default: {' '.join(PLATFORMS)})")
    parser.add_argument("--torch-version", help="the GPU machine's torch, e.g. 2.9.1 (default: any)")
    parser.add_argument("--transformers-version", help="the GPU machine's transformers (default: any)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan; fetch nothing")
    args = parser.parse_args(argv)
    try:  # a folder of its own: pip would add wheels beside (or over) a user's files
        check_owned(args.dest, GPU_WHEELS, "--dest")
    except ForeignPathError as error:
        print(f"gpu_wheels: {error}", file=sys.stderr)
        return 2

    ranges = pinned_in_pyproject([*PACKAGES, DEEPSPEED, *ALREADY_THERE])
    wanted = requirement_list(PACKAGES, ranges)
    deepspeed = requirement_list([DEEPSPEED], ranges)[0]
    torch_range = requirement_list(["torch"], ranges)[0]
    transformers = (f"transformers=={args.transformers_version}" if args.transformers_version
                    else requirement_list(["transformers"], ranges)[0])
    present = [f"torch=={args.torch_version}" if args.torch_version else torch_range, transformers]
    if args.dry_run:
        print_plan(args, [*wanted, deepspeed], present)
        return 0

    claim(args.dest, GPU_WHEELS, "--dest")
    wheel = build_deepspeed(deepspeed, args.dest)
    extra = [r for r in wheel_requirements(wheel) if canonical(Requirement(r).name) not in ALREADY_THERE]
    try:
        packages = resolve([*wanted, *extra, *present], args)
    except subprocess.CalledProcessError:
        if not args.torch_version:
            raise
        # torch's own pins (its CUDA libraries) can be missing from a mirror, and they are left out
        # of the folder anyway: resolve against the pyproject's torch range instead
        print(f"gpu_wheels: torch=={args.torch_version} and its own dependencies do not resolve on this "
              "index; resolving against any torch in ragteam's range instead", file=sys.stderr)
        present = [torch_range, transformers]
        packages = resolve([*wanted, *extra, *present], args)
    # Everything our packages need, less what torch needs: torch's closure is on the GPU machine
    # whatever its version, transformers' varies by release (5.x pulls in pydantic, 4.x did not),
    # so a package both need is carried anyway (pip skips it there if already installed).
    needed = closure(packages, [*PACKAGES, *(Requirement(r).name for r in extra)], args.python_version)
    skip = closure(packages, ["torch"], args.python_version) | {DEEPSPEED}
    skip |= {p["name"] for p in packages if p["name"].startswith(CUDA_TORCH_BRINGS)}
    pins = sorted(f"{p['name']}=={p['version']}" for p in packages if p["name"] in needed - skip)
    pip("download", "--no-deps", *target_flags(args), "--dest", str(args.dest), *pins)
    size = folder_size(args.dest)
    print(f"{len(pins) + 1} wheels in {args.dest}: {size / 2**20:.1f} MB (left out: {len(packages) - len(pins)} "
          f"packages torch and transformers bring)")
    print(f"on the GPU machine (torch and transformers installed): {install_command(args.dest)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

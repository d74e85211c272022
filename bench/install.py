"""uv or pip on a VM: seconds to install the same pinned packages into a fresh venv, from the same index.

    python bench/install.py [--rounds 3]

The packages are those a cell importing numpy, pandas and scikit-learn sends to a VM
(:func:`nbburst.protocol.dist.requirements`), each pinned and installed without its dependencies, as the
bootstrap does, from a local package index (:mod:`nbburst.testing.pypi`) whose wheels are all built before
the clock runs. Each round makes two empty venvs and installs into one with pip and into the other with uv,
both with an empty cache and compiling bytecode, alternating which goes first; it prints the medians and
their ratio.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    from nbburst.protocol import dist
    from nbburst.protocol.uvprogram import uv_program
    from nbburst.testing.pypi import PackageIndex

    for module in ("numpy", "pandas", "sklearn"):
        importlib.import_module(module)
    pins = [f"{name}=={version}" for name, version in dist.requirements("import numpy, pandas, sklearn").items()]
    uv = uv_program()
    if uv is None:
        raise SystemExit(f"no uv in this Python's environment nor on the PATH ({sys.executable} -m pip install uv)")
    base = Path(tempfile.mkdtemp(prefix="nbburst-bench-install-"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV")}
    times: dict[str, list[float]] = {"pip": [], "uv": []}
    try:
        with PackageIndex(base / "index") as index:
            index.add_installed()
            index.build(*(p.split("==")[0] for p in pins))
            url = index.url + "/simple"
            for n in range(args.rounds):
                order = ["pip", "uv"] if n % 2 == 0 else ["uv", "pip"]
                for tool in order:
                    venv, cache = base / f"{tool}-{n}", base / f"cache-{tool}-{n}"
                    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
                    python = str(venv / "bin" / "python")
                    if tool == "pip":
                        cmd = [sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--quiet"]
                        cmd += ["--disable-pip-version-check", "--cache-dir", str(cache), "--index-url", url, *pins]
                    else:
                        cmd = [uv, "pip", "install", "--no-config", "--python", python, "--no-deps", "--quiet"]
                        cmd += ["--compile-bytecode", "--cache-dir", str(cache), "--index-url", url, *pins]
                    times[tool].append(timed(cmd, env))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    pip, uv_s = statistics.median(times["pip"]), statistics.median(times["uv"])
    print(f"\n{len(pins)} pinned packages into a fresh venv, empty cache, local index ({os.cpu_count()} CPUs)")
    print(f"pip {pip:6.1f} s   uv {uv_s:6.1f} s   pip/uv {pip / uv_s:4.1f}x   (medians of {args.rounds} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

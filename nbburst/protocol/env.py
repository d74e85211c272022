"""The notebook's environment, recorded so the machine can match it or refuse.

Pickles only load where the same classes exist, so the machine must run the
same Python minor version and the same versions of the packages the job uses.
"""

from __future__ import annotations

import functools
import platform
import re
import sys
from typing import Any


def installed() -> dict[str, str]:
    """Normalised name -> version of every distribution installed now (read afresh each call)."""
    from importlib import metadata

    packages: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata.get("Name")
        if name:
            packages.setdefault(normalise(name), dist.version)
    return packages


@functools.lru_cache(maxsize=1)
def manifest() -> dict[str, Any]:
    """Python version, platform and every installed distribution (computed once per process)."""
    packages = installed()
    return {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": sys.platform,
        "machine": platform.machine(),
        "packages": dict(sorted(packages.items())),
    }


def normalise(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def python_mismatch(wanted: dict[str, Any]) -> str | None:
    """Why this interpreter cannot load the job's pickles, or None."""
    have = platform.python_version().split(".")[:2]
    want = str(wanted.get("python", "")).split(".")[:2]
    if want and have != want:
        return (
            f"the notebook runs Python {'.'.join(want)} but this machine has Python {'.'.join(have)}; "
            "pickles cannot move between Python minor versions. Use an image with Python "
            f"{'.'.join(want)} (--image / --image-family), e.g. the nbburst image built by `nbburst image build`."
        )
    if wanted.get("implementation", sys.implementation.name) != sys.implementation.name:
        return f"the notebook runs {wanted['implementation']} but this machine runs {sys.implementation.name}"
    return None


def package_differences(wanted: dict[str, str], have: dict[str, str] | None = None) -> dict[str, str]:
    """Distributions whose version differs here or that are missing: name -> wanted version."""
    have = installed() if have is None else have
    return {name: version for name, version in sorted(wanted.items()) if have.get(normalise(name)) != version}

"""The Compute Engine metadata server: identity on a VM, zero configuration on Workbench.

Kept free of other nbburst imports: the agent reads its identity through it
before anything else is loaded.
"""

from __future__ import annotations

import os


def metadata(path: str, timeout: float = 0.5) -> str | None:
    """A value from the metadata server, or None off Google Cloud (one short try)."""
    import urllib.request  # only needed on Compute Engine: keep the agent's start light elsewhere

    base = f"http://{host() or 'metadata.google.internal'}/computeMetadata/v1/"
    req = urllib.request.Request(base + path, headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.read().decode()
    except Exception:
        return None


def on_gce() -> bool:
    """Whether a metadata server is there to ask (a VM, or the emulator's instances)."""
    if os.environ.get("GCE_METADATA_HOST") or os.path.exists("/etc/google_instance_id"):
        return True
    try:
        with open("/sys/class/dmi/id/product_name") as f:
            return "Google" in f.read()
    except OSError:
        return False


def host() -> str | None:
    """The metadata server's host, or None off Compute Engine (and its emulator)."""
    return os.environ.get("GCE_METADATA_HOST") or ("metadata.google.internal" if on_gce() else None)

"""scripts/setup on a network it cannot install from: one message saying what to set (a proxy, a mirror, a
certificate), not pip's retries and a traceback. Run as a fresh machine would: the system's PATH only, an empty
home folder, a virtualenv of its own (made without pip, so that nothing is installed before the check)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def closed_port() -> int:
    """A port of 127.0.0.1 nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def setup(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    venv = tmp_path / "venv"
    if not venv.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    clean = {"PATH": SYSTEM_PATH, "HOME": str(home), "NBBURST_VENV": str(venv), **env}
    return subprocess.run(
        [str(REPO / "scripts" / "setup"), "examples"], env=clean, capture_output=True, text=True, timeout=300
    )


def test_an_index_that_cannot_be_reached_is_one_message_saying_what_to_set(tmp_path):
    index = f"http://127.0.0.1:{closed_port()}/simple"
    proc = setup(tmp_path, PIP_INDEX_URL=index)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = proc.stderr
    assert f"the package index {index} cannot be reached" in err and "Connection refused" in err
    for fix in ("HTTPS_PROXY=", "PIP_INDEX_URL=", "UV_DEFAULT_INDEX", "update-ca-certificates", "SSL_CERT_FILE"):
        assert fix in err, f"{fix} missing from:\n{err}"
    assert "Traceback" not in err
    assert not list((tmp_path / "venv").glob("lib/python*/site-packages/pip")), "nothing was installed"


def test_an_index_that_is_not_a_url_is_named(tmp_path):
    proc = setup(tmp_path, PIP_INDEX_URL="mirror.example.com/simple")
    assert proc.returncode == 1
    assert "the package index 'mirror.example.com/simple' is not an http(s) URL" in proc.stderr
    assert "Traceback" not in proc.stderr

"""The guest environment's script runner, as an emulated VM's metadata scripts meet it.

On a Compute Engine Linux image, ``google-startup-scripts.service`` (and ``google-shutdown-scripts.service``)
start ``google_metadata_script_runner``, which runs the script from the metadata server
(https://cloud.google.com/compute/docs/instances/startup-scripts/linux,
https://github.com/GoogleCloudPlatform/guest-agent). What a script's programs see there, and what breaks
programs written on a laptop:

* systemd's environment: no ``HOME`` (nor ``USER``), working folder ``/``
  (https://www.freedesktop.org/software/systemd/man/latest/systemd.exec.html#Environment%20Variables%20in%20Spawned%20Processes);
* its output goes through a pipe that the runner reads line by line with Go's ``bufio.Scanner``, whose
  longest line is 64 KiB (https://pkg.go.dev/bufio#MaxScanTokenSize): after a longer line the runner reads
  no more, and once the pipe is full every program writing to it blocks;
* the unit has ``KillMode=process``
  (https://github.com/GoogleCloudPlatform/compute-image-packages/pull/207): at the soft-off only the runner
  is stopped. The script and its children get no signal, but their pipe breaks (a write raises
  ``BrokenPipeError`` or kills with SIGPIPE). The remaining processes get SIGTERM only from systemd's last
  stage (https://www.freedesktop.org/software/systemd/man/latest/systemd-shutdown.html), after the units,
  and so after the shutdown script, have stopped; a spot VM is powered off 30 s after the soft-off whatever
  is still running (https://cloud.google.com/compute/docs/instances/spot#preemption-process).

:class:`ScriptRun` is that runner for an emulated instance: the script in a session of its own, its output
read by a thread of the emulator into the serial console.
"""

from __future__ import annotations

import os
import select
import subprocess
import threading
from pathlib import Path

#: The longest line the runner reads (bufio.MaxScanTokenSize).
MAX_LINE = 64 * 1024
#: What systemd does not give a service's processes.
NOT_GIVEN = ("HOME", "USER", "LOGNAME", "SHELL", "MAIL", "OLDPWD", "PWD")


def service_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` as a systemd service gets it: without the login variables (HOME, USER...)."""
    return {k: v for k, v in env.items() if k not in NOT_GIVEN}


class ScriptRun:
    """One metadata script run by the guest's script runner: ``proc`` is the script (bash), whose output a
    thread copies line by line to ``console``; :meth:`stop_runner` is the soft-off of the runner's unit."""

    def __init__(self, key: str, path: Path, console: Path, env: dict[str, str]):
        self.key, self.console = key, console
        cmd = [str(path)] if path.read_text().startswith("#!") else ["/bin/bash", str(path)]
        read_end, write_end = os.pipe()
        try:
            self.proc = subprocess.Popen(
                cmd,
                cwd="/",
                env=service_env(env),
                stdin=subprocess.DEVNULL,
                stdout=write_end,
                stderr=write_end,
                start_new_session=True,
            )
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        self._fd = read_end
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True, name=f"guest-{key}-runner")
        self._thread.start()

    def stop_runner(self) -> None:
        """Stop the runner (KillMode=process): the script's output pipe breaks; the script gets no signal."""
        self._stop.set()
        self._thread.join(timeout=5)

    def _write(self, data: bytes) -> None:
        try:
            with open(self.console, "ab") as out:
                out.write(data)
        except OSError:
            pass

    def _read(self) -> None:
        pending = b""
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select([self._fd], [], [], 0.05)
                if not ready:
                    continue
                chunk = os.read(self._fd, 65536)
                if not chunk:
                    break
                *lines, pending = (pending + chunk).split(b"\n")
                lines = [line + b"\n" for line in lines]
                long = next((i for i, line in enumerate(lines) if len(line) > MAX_LINE + 1), None)
                self._write(b"".join(lines[:long]))
                if long is not None or len(pending) > MAX_LINE:
                    # The runner's scanner fails on the line and reads no more; the pipe stays open and fills.
                    self._write(f"{self.key}: error reading output: bufio.Scanner: token too long\n".encode())
                    self._stop.wait()
                    return
            if pending:
                self._write(pending + b"\n")
        finally:
            os.close(self._fd)

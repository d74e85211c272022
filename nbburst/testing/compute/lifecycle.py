"""Lifecycle of emulated instances: boot, soft-off/hard-off, preemption, maintenance, expiry.

Every change runs in a background thread holding the instance's `transition` lock, so changes
to one instance happen one after another, while the API answers at once with an operation.
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
import signal
import sys
import threading
import time
import uuid

from nbburst.testing.compute import catalog as cat
from nbburst.testing.compute.instance import Instance, stock_path, write_nvidia_smi

log = logging.getLogger("nbburst.testing")


class LifecycleMixin:
    """Instance lifecycle; mixed into ComputeEmulator, whose state it uses (`_lock`, `_cond`,
    `_instances`, `_closing`, `_closed`, `_procs`, `_threads`, graces and delays)."""

    def _lifecycle_op(self, project, zone, name, op_type, request_id, runner) -> dict:
        with self._lock:
            prior = self._prior(project, request_id)
            if prior:
                return prior
            inst = self._get(project, zone, name)
            op = self._new_op(inst, op_type, request_id)
            self._spawn(runner, inst, op)
            return copy.deepcopy(op)

    def _run_insert(self, inst: Instance, op: dict) -> None:
        with inst.transition:
            self._pause(self.operation_delay)
            with self._lock:
                if inst.deleted or self._closing:
                    return self._finish(op)
                if self._is_exhausted(inst):
                    self._remove(inst)
                    return self._finish(op, self._exhausted_error(inst))
                inst.status = "STAGING"
                self._cond.notify_all()
            self._initialize_disk(inst)
            self._pause(self.operation_delay / 2)
            self._boot(inst)
        self._finish(op)

    def _initialize_disk(self, inst: Instance) -> None:
        """A disk made from an image that has content (images.insert from a disk) starts as a copy of it."""
        image = inst.plan.image
        if image is None or not image.content:
            return
        try:
            shutil.copytree(image.content, inst.disk, symlinks=True, dirs_exist_ok=True)
        except OSError as e:
            inst.log(f"nbburst-emulator: could not copy image {image.name} to the disk: {e}")

    def _run_start(self, inst: Instance, op: dict) -> None:
        with inst.transition:
            self._pause(self.operation_delay)
            with self._lock:
                if inst.deleted or self._closing or inst.status != "TERMINATED":
                    return self._finish(op)
                if self._is_exhausted(inst):
                    return self._finish(op, self._exhausted_error(inst))
                inst.status = "STAGING"
                self._cond.notify_all()
            self._pause(self.operation_delay / 2)
            self._boot(inst)
        self._finish(op)

    def _run_stop(self, inst: Instance, op: dict) -> None:
        self._pause(self.operation_delay)
        with inst.transition:
            if not inst.deleted and inst.status != "TERMINATED":
                self._power_down(inst, self.stop_grace, "stop")
                self._terminated(inst)
        self._finish(op)

    def _run_reset(self, inst: Instance, op: dict) -> None:
        self._pause(self.operation_delay)
        with inst.transition:
            if not inst.deleted and inst.status == "RUNNING":
                self._power_down(inst, 0, "reset", run_shutdown_script=False)
                self._boot(inst)
        self._finish(op)

    def _run_delete(self, inst: Instance, op: dict) -> None:
        self._pause(self.operation_delay)
        with inst.transition:
            if not inst.deleted:
                if inst.status != "TERMINATED":
                    self._power_down(inst, self.stop_grace, "delete")
                with self._lock:
                    self._remove(inst)
        self._finish(op)

    def _run_preempt(self, inst: Instance, grace: float | None, done: threading.Event | None = None) -> None:
        try:
            with inst.transition:
                self._preempt_now(inst, grace)
        finally:
            if done:
                done.set()

    def _preempt_now(self, inst: Instance, grace: float | None) -> None:
        if inst.deleted or inst.status != "RUNNING":
            return
        with self._lock:
            inst.preempted, inst.maintenance_event = True, "TERMINATE_ON_HOST_MAINTENANCE"
            inst.metadata.update({"instance/preempted": "TRUE", "instance/maintenance-event": inst.maintenance_event})
        self._power_down(inst, self.preemption_grace if grace is None else grace, "preempted")
        self._terminate_by_action(inst, "compute.instances.preempted", "Instance was preempted.")

    def _run_expire(self, inst: Instance) -> None:
        with inst.transition:
            if inst.deleted or inst.status != "RUNNING":
                return
            self._power_down(inst, self.preemption_grace, "maxRunDuration reached")
            self._terminate_by_action(inst, None, None)

    def _terminate_by_action(self, inst: Instance, op_type: str | None, message: str | None) -> None:
        with self._lock:
            if op_type:
                self._system_op(inst, op_type, message)
            if inst.resource["scheduling"].get("instanceTerminationAction") == "DELETE":
                self._remove(inst)
            else:
                self._terminated(inst)

    def _run_maintenance(self, inst: Instance, op: dict | None = None, done: threading.Event | None = None):
        try:
            with inst.transition:
                sched = inst.resource["scheduling"]
                if inst.deleted or inst.status != "RUNNING":
                    pass
                elif sched["preemptible"]:
                    self._preempt_now(inst, None)
                elif sched["onHostMaintenance"] == "TERMINATE":
                    self._set_maintenance(inst, "TERMINATE_ON_HOST_MAINTENANCE")
                    self._pause(self.maintenance_notice)
                    self._power_down(inst, self.stop_grace, "host maintenance")
                    with self._lock:
                        self._system_op(
                            inst,
                            "compute.instances.terminateOnHostMaintenance",
                            "Instance terminated for host maintenance.",
                        )
                        self._terminated(inst)
                    if sched["automaticRestart"] and not self._closing:
                        with self._lock:
                            self._system_op(
                                inst, "compute.instances.automaticRestart", "Instance automatically restarted."
                            )
                        self._boot(inst)
                else:
                    self._set_maintenance(inst, "MIGRATE_ON_HOST_MAINTENANCE")
                    self._pause(min(self.maintenance_notice, 1.0))
                    self._set_maintenance(inst, "NONE")
                    with self._lock:
                        self._system_op(
                            inst,
                            "compute.instances.migrateOnHostMaintenance",
                            "Instance migrated during host maintenance.",
                        )
        finally:
            if op:
                self._finish(op)
            if done:
                done.set()

    def _run_guest_off(self, inst: Instance, reboot: bool, boot: int | None = None) -> None:
        with inst.transition:
            if inst.deleted or inst.status != "RUNNING" or (boot is not None and boot != inst.boots):
                return
            self._power_down(inst, self.stop_grace, "guest OS reboot" if reboot else "guest OS poweroff")
            with self._lock:
                self._system_op(inst, "compute.instances.guestTerminate", "Instance terminated by guest OS.")
                self._terminated(inst)
            if reboot:
                self._boot(inst)

    def _set_maintenance(self, inst: Instance, event: str) -> None:
        with self._lock:
            inst.maintenance_event = event
            inst.metadata.set("instance/maintenance-event", event)

    def _boot(self, inst: Instance) -> None:
        with self._lock:
            if inst.deleted or self._closing:
                return
            inst.boots += 1
            inst.preempted, inst.maintenance_event = False, "NONE"
            inst.metadata.update({"instance/preempted": "FALSE", "instance/maintenance-event": "NONE"})
            inst.log(f"nbburst-emulator: booting {inst.name} (boot {inst.boots})")
            script = inst.attribute("startup-script")
            if script is not None:
                inst.proc = self._start_script(inst, "startup-script", script)
                inst.exit_logged = False
                inst.log(f"nbburst-emulator: startup-script started (pid {inst.proc.pid})")
            inst.status = "RUNNING"
            inst.resource["lastStartTimestamp"] = cat.rfc3339()
            inst.resource["cpuPlatform"] = "Intel Cascade Lake"
            mrd = inst.resource["scheduling"].get("maxRunDuration")
            inst.deadline = time.monotonic() + int(mrd["seconds"]) * self.time_scale if mrd else None
            self._cond.notify_all()

    def _power_down(self, inst: Instance, grace: float, reason: str, run_shutdown_script: bool = True):
        """The guest's shutdown as systemd runs it (see :mod:`.guest`): at the soft-off only the startup
        script's runner stops (KillMode=process: the script and what it started get no signal, their output
        pipe breaks) and the shutdown-script starts; once it is done, systemd's last stage sends SIGTERM to
        every process left; hard-off (SIGKILL) once none is left or ``grace`` seconds after the soft-off."""
        with self._lock:
            if inst.deleted:
                return
            inst.status = "STOPPING"
            inst.deadline = None
            self._cond.notify_all()
            inst.log(f"nbburst-emulator: {reason}: soft-off signal, hard-off in {grace:g} s")
            inst.stop_runners()
            script = inst.attribute("shutdown-script") if run_shutdown_script else None
            if script is not None and not self._closing:
                inst.shutdown_proc = self._start_script(inst, "shutdown-script", script)
            else:
                inst.shutdown_proc = None
        end, last_stage = time.monotonic() + grace, False
        while time.monotonic() < end and not self._closing and inst.alive():
            if not last_stage and (inst.shutdown_proc is None or inst.shutdown_proc.poll() is not None):
                inst.log("nbburst-emulator: sending SIGTERM to remaining processes")
                inst.signal(signal.SIGTERM)
                last_stage = True
            time.sleep(0.05)
        inst.hard_kill()
        inst.log(f"nbburst-emulator: {reason}: powered off")

    def _terminated(self, inst: Instance) -> None:
        with self._lock:
            if not inst.deleted:
                inst.status = "TERMINATED"
                inst.deadline = None
                inst.resource["lastStopTimestamp"] = cat.rfc3339()
            self._cond.notify_all()

    def _remove(self, inst: Instance) -> None:
        """Forget the instance at once; its metadata server and its folder go in the background. Callers hold
        the emulator's lock, which every API call and every other instance's change waits for, and deleting a
        disk that holds a virtual environment takes long. The folder is renamed first, so an instance of the
        same name inserted next starts on a fresh one; nothing waits for its deletion, not even stop()."""
        with self._lock:
            self._instances.pop((inst.project, inst.zone, inst.name), None)
            inst.deleted = True
            self._cond.notify_all()
            if inst.metadata:
                self._spawn(inst.metadata.stop)
            trash = inst.dir.with_name(f"{inst.dir.name}.deleted-{uuid.uuid4().hex[:8]}")
            try:
                inst.dir.rename(trash)
            except FileNotFoundError:
                return
        threading.Thread(target=shutil.rmtree, args=(trash, True), daemon=True, name="compute-emulator-rm").start()

    def _monitor(self) -> None:
        while not self._closed.wait(0.1):
            now = time.monotonic()
            with self._lock:
                for inst in list(self._instances.values()):
                    if inst.status != "RUNNING":
                        continue
                    if inst.proc is not None and not inst.exit_logged and inst.proc.poll() is not None:
                        inst.exit_logged = True
                        inst.log(f"nbburst-emulator: startup-script exit status {inst.proc.returncode}")
                    if inst.deadline is not None and now >= inst.deadline:
                        inst.deadline = None
                        self._spawn(self._run_expire, inst)

    def _instance_env(self, inst: Instance) -> dict[str, str]:
        dropped = ("PYTEST_CURRENT_TEST", "GOOGLE_APPLICATION_CREDENTIALS")
        env = {k: v for k, v in os.environ.items() if not k.startswith("NBBURST_") and k not in dropped}
        env.update(self.instance_env)
        env.update(inst.metadata.env())
        env.update(
            {
                "NBBURST_COMPUTE_ENDPOINT": self.endpoint,
                "NBBURST_EMULATOR_INSTANCE": inst.path,
                "NBBURST_EMULATOR_DISK": str(inst.disk),  # the instance's boot disk (scripts start in /)
                "NBBURST_EMULATOR_BOOT": str(inst.boots),
                "HOSTNAME": inst.name,
                "PATH": os.pathsep.join(self._instance_path(inst, env.get("PATH", os.defpath))),
            }
        )
        if inst.plan.image is not None and inst.plan.image.python:  # a stock image: nothing of this machine's Pythons
            for var in ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE"):
                env.pop(var, None)
        return env

    def _instance_path(self, inst: Instance, host_path: str) -> list[str]:
        """The instance's PATH: its own ``nvidia-smi`` when it has GPUs and its image a driver, the emulator's
        shims, this Python, then the host's PATH without any folder holding the host's ``nvidia-smi`` (an
        instance without a driver has none, whatever this machine has). On a stock image, after the shims, only
        the image's own python3 and this machine's system programs (:func:`stock_path`)."""
        own = []
        gpus = inst.gpus()
        if gpus and inst.nvidia_driver:
            if self.driver_delay > 0 and not (inst.dir / "bin" / "nvidia-smi").exists():
                self._spawn(self._install_driver, inst, gpus, inst.boots)
            else:
                write_nvidia_smi(inst.dir / "bin", gpus)
            own.append(str(inst.dir / "bin"))
        if inst.plan.image is not None and inst.plan.image.python:
            return [*own, str(self._bin), *stock_path(self.base_dir / "stock", inst.plan.image.python)]
        host = [d for d in host_path.split(os.pathsep) if d and not os.path.exists(os.path.join(d, "nvidia-smi"))]
        return [*own, str(self._bin), os.path.dirname(sys.executable), *host]

    def _install_driver(self, inst: Instance, gpus: list[str], boot: int) -> None:
        """The Deep Learning VM image installing its NVIDIA driver at the first boot: nvidia-smi after
        ``driver_delay`` seconds, if the instance still runs that boot."""
        self._pause(self.driver_delay)
        with self._lock:
            if not inst.deleted and not self._closing and inst.boots == boot and inst.status == "RUNNING":
                write_nvidia_smi(inst.dir / "bin", gpus)
                inst.log("nbburst-emulator: the NVIDIA driver is installed")

    def _spawn(self, fn, *args) -> None:
        def run():
            try:
                fn(*args)
            except Exception:  # a lifecycle thread must never die silently
                log.exception("compute emulator: %s failed", getattr(fn, "__name__", fn))

        name = f"compute-emulator-{getattr(fn, '__name__', 'task')}"
        t = threading.Thread(target=run, daemon=True, name=name)
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()]
            self._threads.append(t)
        t.start()

    def _pause(self, seconds: float) -> None:
        if seconds > 0:
            self._closed.wait(seconds)

    def _start_script(self, inst: Instance, key: str, script: str):
        """Start a metadata script; call under the lock, after checking `_closing`."""
        proc = inst.run_script(key, script, self._instance_env(inst))
        self._procs = [p for p in self._procs if p.returncode is None]
        self._procs.append(proc)
        return proc

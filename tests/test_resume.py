"""``--resume JOB``: a new job begins with another job's latest checkpoints, re-signed for it; refusals."""

from __future__ import annotations

import pytest
from support import machines_gone, wait_until

import nbburst
from nbburst.client.burst import Burst
from nbburst.client.capture import capture
from nbburst.client.job import Job
from nbburst.client.resume import ResumeRefused
from nbburst.protocol import sealed
from nbburst.protocol.job import JobLayout, State

LOOP = """
import nbburst, time
acc = nbburst.checkpoint.load("acc", default=1)
for i in nbburst.checkpoint.range(STEPS, name="train"):
    acc = (acc * 31 + i) % 1_000_003
    nbburst.checkpoint.save("acc", acc)
    print("step", i, flush=True)
    time.sleep(PAUSE)
result = acc
versions = nbburst.checkpoint.versions("acc")
"""


def loop(steps: int, pause: float = 0.0) -> str:
    return LOOP.replace("STEPS", str(steps)).replace("PAUSE", str(pause))


def expected(steps: int) -> int:
    acc = 1
    for i in range(steps):
        acc = (acc * 31 + i) % 1_000_003
    return acc


def submit(burst: Burst, code: str, **options) -> Job:
    return burst.submit_cell(code, capture(code, {}, None, set()), burst.options(**options))


def steps(job: Job) -> list[int]:
    return [int(line.split()[1]) for line in job.logs().splitlines() if line.startswith("step ")]


def finished(job: Job) -> dict:
    assert job.wait(timeout=90) == State.SUCCEEDED, (job.terminal(), job.logs())
    machines_gone(job.machines, job.id)
    return job.outcome().values


def test_a_cancelled_loop_resumed_by_another_job_ends_as_an_uninterrupted_run(burst_env):
    burst = Burst()
    first = submit(burst, loop(12, 0.3), name="train")
    wait_until(lambda: len(steps(first)) >= 4, timeout=60, what="step 4")
    assert first.cancel() == State.CANCELLED
    machines_gone(first.machines, first.id)
    done = max(steps(first))
    assert done < 11

    second = submit(burst, loop(12), resume="train")  # by name; the same cell
    values = finished(second)
    assert values["result"] == expected(12)  # as if it had never stopped
    assert second.spec.resumed_from == first.id
    ran = steps(second)
    assert ran[0] >= 1 and ran[0] <= done + 1 and ran[-1] == 11  # it went on where the first one stopped
    assert f"nbburst: resuming job {first.id}:" in second.logs() and "1 loop(s)" in second.logs()
    assert len(values["versions"]) == nbburst.checkpoint.KEEP  # the versions came along

    # a chain, with a changed cell (more epochs): resumed from the resumed job
    third = submit(burst, loop(15), resume=second.id)
    values = finished(third)
    assert values["result"] == expected(15) and steps(third) == [12, 13, 14]
    assert third.info()["resumed_from"] == second.id


def test_a_resumed_search_recomputes_no_finished_fit(burst_env, tmp_path):
    """A search whose job failed afterwards (a bug in the evaluation): the fixed cell resumes it, no fit again."""
    fits = tmp_path / "fits.log"
    code = f"""
from sklearn.datasets import load_digits
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import GridSearchCV

class Logged(SGDClassifier):
    def fit(self, X, y, **kw):
        with open({str(fits)!r}, "a") as f:
            f.write(f"{{self.alpha!r}} {{len(y)}}\\n")
        return super().fit(X, y, **kw)

X, y = load_digits(return_X_y=True)
X, y = X[:300] / 16.0, y[:300]
search = GridSearchCV(Logged(max_iter=5, tol=None, random_state=0), {{"alpha": [1e-4, 1e-3, 1e-2]}}, cv=3, n_jobs=1)
search.fit(X, y)
scores = list(search.cv_results_["mean_test_score"])
"""
    burst = Burst()
    first = submit(burst, code + "raise RuntimeError('a bug in the evaluation')\n")
    assert first.wait(timeout=90) == State.FAILED
    machines_gone(first.machines, first.id)
    cv_fits = [ln for ln in fits.read_text().splitlines() if ln.endswith(" 200")]  # 3 folds of 300 rows
    assert len(cv_fits) == 9

    second = submit(burst, code, resume=first.id)
    scores = finished(second)["scores"]
    lines = fits.read_text().splitlines()
    assert [ln for ln in lines if ln.endswith(" 200")] == cv_fits, "a finished fit ran again"
    assert lines[-1].endswith(" 300")  # only the refit of the best candidate (not a task of the search) ran
    assert "9 finished parallel task(s)" in second.logs()
    ns: dict = {}
    exec(compile(code, "<local>", "exec"), ns)  # the same search, here
    assert scores == ns["scores"]


def test_a_refusal_names_the_job_as_the_user_did(burst_env):
    burst = Burst()
    named = submit(burst, "x = 1", name="a0")
    finished(named)
    with pytest.raises(ResumeRefused, match=rf"--resume: job a0 \({named.id}\) has no checkpoints"):
        submit(burst, "x = 2", resume="a0")


def test_resume_refusals(burst_env):
    burst = Burst()
    with pytest.raises(ResumeRefused, match="no job with id or name 'nowhere'"):
        submit(burst, "x = 1", resume="nowhere")
    plain = submit(burst, "x = 1")
    finished(plain)
    with pytest.raises(ResumeRefused, match="has no checkpoints"):
        submit(burst, "x = 2", resume=plain.id)

    saved = submit(burst, "import nbburst\nnbburst.checkpoint.save('w', [1, 2, 3])")
    finished(saved)
    store, layout = burst.store, JobLayout(saved.id)
    (obj,) = [k for k in store.list(layout.checkpoints) if "/state/" in k]
    genuine = store.get(obj)
    store.put(obj, genuine[:-1] + bytes([genuine[-1] ^ 1]))  # one bit changed in the Store
    with pytest.raises(ResumeRefused, match="do not verify"):
        submit(burst, "x = 3", resume=saved.id)
    store.put(obj, sealed.seal(b"k" * 32, saved.id, saved.folder.place(obj), b"unsigned state"))  # another key
    with pytest.raises(ResumeRefused, match="do not verify"):
        submit(burst, "x = 3", resume=saved.id)
    store.put(obj, genuine)
    burst.keyring.delete(saved.id)  # a job whose key this machine does not have
    with pytest.raises(ResumeRefused, match="cannot be verified here"):
        submit(Burst(), "x = 3", resume=saved.id)
    assert len(burst.jobs()) == 2  # nothing was launched or left half-written by the refusals

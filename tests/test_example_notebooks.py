"""The example notebooks run end to end on the local backend, as a user would run them."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from support.nbrun import error, run, stream

ROOT = Path(__file__).resolve().parents[1]
CENSUS_DATA = ROOT / "notebooks" / "data" / "census"  # shipped with the notebook: nothing outside the repository


def outputs_text(nb) -> str:
    return "".join(stream(cell.get("outputs", [])) for cell in nb.cells if cell.cell_type == "code")


def assert_no_errors(nb) -> None:
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert error(cell.outputs) is None, (cell.source, error(cell.outputs))


@pytest.mark.slow
def test_quickstart(burst_env):
    nb = run(nbformat.read(ROOT / "notebooks" / "quickstart.ipynb", as_version=4), cwd=ROOT / "notebooks")
    assert_no_errors(nb)
    text = outputs_text(nb)
    assert "12 candidates" in text
    best = re.search(r"best parameters: (\{.*\})", text)
    assert best and "max_depth" in best.group(1)  # the next, local cell used search.best_params_
    accuracy = float(re.search(r"test accuracy: ([0-9.]+)", text).group(1))
    assert accuracy > 0.9
    # scripts/quickstart prints each display's text: the job view's is nbburst's own final summary line
    shown = [o["data"].get("text/plain", "") for c in nb.cells for o in c.get("outputs", []) if "data" in o]
    summary = [s for s in shown if s.startswith("nbburst job quickstart-search")]
    assert len(summary) == 1 and re.search(r"\): ✔ SUCCEEDED in (\d+m )?\d+s · local · \$0\.00", summary[0]), shown


@pytest.mark.slow
def test_census_reads_its_data_from_a_location_variable(burst_env):
    assert (CENSUS_DATA / "adult.data.gz").exists(), f"the census data set is expected in {CENSUS_DATA}"
    nb = nbformat.read(ROOT / "notebooks" / "census.ipynb", as_version=4)
    location = next(c for c in nb.cells if c.cell_type == "code" and "DATA = " in c.source)
    assert 'os.path.abspath("data/census")' in location.source  # run as shipped: the folder beside the notebook
    nb = run(nb, cwd=ROOT / "notebooks", timeout=600)
    assert_no_errors(nb)
    text = outputs_text(nb)
    assert "32561 training rows, 16281 test rows" in text
    accuracy = float(re.search(r"test accuracy: ([0-9.]+)", text).group(1))
    assert 0.85 < accuracy < 0.9  # gradient-boosted trees on this data set: about 0.87


@pytest.mark.slow
def test_resume(burst_env, tmp_path):
    """notebooks/resume.ipynb: train, stop, resume with more data in a new job, evaluate, list the job's files."""
    nb = run(nbformat.read(ROOT / "notebooks" / "resume.ipynb", as_version=4), cwd=tmp_path, timeout=300)
    assert_no_errors(nb)
    text = outputs_text(nb)
    assert "epoch 3 is done" in text and "each exactly once: True" in text
    assert "rows per epoch: [500, 1257]" in text  # the first job's data, then all of it
    assert float(re.search(r"test accuracy: ([0-9.]+)\n", text).group(1)) > 0.9
    assert re.search(r"results/history\.json +\d+ bytes, here: True", text)
    assert re.search(r"results/model\.pkl +\d+ bytes, here: True", text)
    assert (tmp_path / "results" / "model.pkl").exists()  # next to the notebook, as from a plain cell

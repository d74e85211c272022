"""Real third-party notebooks give the same results under ``%%burst`` on every cell as plainly.

Each notebook of ``tests/thirdparty/`` (statsmodels, pydata-book, pandas-tutorial, IPython Cookbook and
matplotlib-course ``.ipynb`` files as their authors wrote them, with the data files and modules they read
beside them; networkx and imbalanced-learn sphinx-gallery scripts split at their ``# %%`` markers) runs in a
fresh kernel twice through nbclient: plainly, and with ``%%burst`` before every code cell on the
local backend (tests/support/fidelity.py). The two runs must agree cell by cell on stdout, ``Out``, the
display MIME types and whether (and what) the cell raised, and at the end on the namespace
(types, values or hashes, fitted or not).

What a notebook does not reproduce even between two plain runs of its own is listed in
:data:`VARIES`, per notebook, with the reason, and left out of its comparison; nothing else is.

A burst run starts a new agent process per cell, so the whole corpus takes long: by default a
representative subset (:data:`SUBSET`, every project) runs; ``pytest --corpus=all`` runs
every notebook. Some (:data:`ON_SESSION`; all with ``--corpus=all``) run a third time, every cell
on one warm session.

The notebooks of :data:`HELD_OUT` are in no run but ``pytest --corpus=held-out``: a check kept aside
from the work on the others, measured last, so that a fix shaped to the corpus shows as such.
"""

from __future__ import annotations

import pytest
from support.fidelity import aspect_keys, check, discover, notebook_id

_UNSEEDED = "draws random numbers without a seed: two plain runs differ too"

#: Aspects a notebook does not reproduce between two plain runs (``python tests/support/fidelity.py --control``
#: finds them), with why. Aspects are named as the harness reports them: ``cell N stdout|out|mimes|error``
#: or ``namespace NAME``.
VARIES: dict[str, dict[str, str]] = {
    "imbalanced-learn/plot_make_imbalance": {
        "namespace X_resampled": "make_imbalance(...) without a random_state: " + _UNSEEDED,
    },
    "imbalanced-learn/plot_outlier_rejections": dict.fromkeys(
        [
            "cell 1 stdout",
            "namespace X_inliers",
            "namespace X_test",
            "namespace X_train",
            "namespace blobs",
            "namespace moons",
            "namespace y_inliers",
            "namespace y_pred",
        ],
        "make_moons/make_blobs without a random_state: " + _UNSEEDED,
    ),
    "imbalanced-learn/plot_sampling_strategy_usage": dict.fromkeys(
        [
            "namespace X",
            "namespace X_res",
            "namespace binary_X",
            "namespace binary_mask",
            "namespace binary_y",
            "namespace y",
            "namespace y_res",
        ],
        "make_imbalance(iris...) and the samplers without a random_state: " + _UNSEEDED,
    ),
    "statsmodels/distributed_estimation": dict.fromkeys(
        ["namespace X", "namespace beta", "namespace y"], "np.random.normal(...) without a seed: " + _UNSEEDED
    ),
    "statsmodels/gee_nested_simulation": dict.fromkeys(
        [
            "cell 13 out",
            "namespace df",
            "namespace groups_re",
            "namespace level1_re",
            "namespace level2_re",
            "namespace xmat",
            "namespace y",
        ],
        "simulated data from np.random.normal(...) without a seed, and the fit on it: " + _UNSEEDED,
    ),
    "statsmodels/predict": dict.fromkeys(
        [
            "cell 4 stdout",
            "cell 5 stdout",
            "cell 6 stdout",
            "cell 9 out",
            "cell 10 out",
            "namespace y",
            "namespace ynewpred",
            "namespace ypred",
        ],
        "y from np.random.normal(...) without a seed, and the fit on it: " + _UNSEEDED,
    ),
    "statsmodels/robust_models_0": dict.fromkeys(
        [
            "cell 8 stdout",
            "cell 9 stdout",
            "cell 11 stdout",
            "cell 12 stdout",
            "namespace iv_l",
            "namespace iv_u",
            "namespace y2",
        ],
        "y2 from np.random.normal(...) without a seed, and the fits on it: " + _UNSEEDED,
    ),
    "statsmodels/ets": {"namespace simulated": "fit.simulate(...) without a random_state: " + _UNSEEDED},
    "scientific-python-lectures/Lecture-1-Introduction-to-Python-Programming": {
        "cell 123 stdout": "`help(mymodule)` prints the module's file, in the run's own temporary folder: "
        "two plain runs differ too",
    },
    "scientific-python-lectures/Lecture-2-Numpy": dict.fromkeys(
        [
            "cell 22 out",
            "cell 23 out",
            "cell 32 out",
            "cell 34 stdout",
            "cell 35 stdout",
            "cell 37 out",
            "cell 42 out",
            "cell 43 out",
            "cell 44 out",
            "cell 45 out",
            "cell 46 out",
            "cell 48 out",
            "cell 50 out",
            "cell 128 out",
            "cell 129 out",
            "cell 130 out",
            "cell 131 out",
        ],
        "random.rand(...) without a seed, and what is printed or saved of it: " + _UNSEEDED,
    ),
    "ipython-cookbook/07_test": dict.fromkeys(
        ["cell 4 stdout", "cell 6 stdout", "cell 8 stdout"],
        "`!pytest first.py` prints its rootdir, the run's own temporary folder: two plain runs differ too",
    ),
    "lmfit/discuss_model_eval_uncertainty": dict.fromkeys(
        ["cell 8 stdout", "namespace dy_dscale001", "namespace dy_dscale333", "namespace dy_umath", "namespace yy"],
        "yy from np.random.normal(...) without a seed, and the fit on it: " + _UNSEEDED,
    ),
    "mesa/analysis": dict.fromkeys(
        ["cell 5 out", "cell 10 out", "namespace df", "namespace model_out", "namespace results"],
        "Schelling(...) and batch_run(...) without a seed, and the data collected from them: " + _UNSEEDED,
    ),
    "mesa/2_collecting_data": dict.fromkeys(
        [
            "namespace agent_wealth",
            "namespace agent_wealth_long",
            "namespace end_wealth",
            "namespace gini",
            "namespace multiple_agents_wealth",
            "namespace one_agent_wealth",
        ],
        "MoneyModel(...) without a seed, and the data collected from it: " + _UNSEEDED,
    ),
    "networkx/plot_expected_degree_sequence": dict.fromkeys(
        ["cell 1 stdout", "namespace dh", "namespace i"],
        "nx.expected_degree_graph(w) without a seed: " + _UNSEEDED,
    ),
}

#: The notebooks run by default: each project's quickest, plus the ones that once showed a cause
#: (a data file beside the notebook, a seaborn colormap in rcParams, a formula naming a notebook
#: function, a Pipeline fitted in place). pydata-book's ch09 (56 cells, a new machine each: two minutes of
#: the default run) runs by default on a warm session only (:data:`ON_SESSION`); ``--corpus=all`` runs both.
SUBSET = [
    "imbalanced-learn/plot_classification_report",
    "imbalanced-learn/plot_illustration_generation_sample",
    "imbalanced-learn/plot_make_imbalance",
    "imbalanced-learn/plot_pipeline_classification",
    "imbalanced-learn/plot_multi_class_under_sampling",
    "networkx/plot_blockmodel",
    "networkx/plot_karate_club",
    "networkx/plot_degree",
    "networkx/plot_center_node",
    "networkx/plot_knuth_miles",
    "statsmodels/glm_formula",
    "statsmodels/lowess",
    "statsmodels/wls",
    "statsmodels/distributed_estimation",
    "statsmodels/tsa_dates",
    "pydata-book/ch06",
    "pydata-book/ch10",
    "pandas-tutorial/02 - Data structures",
    "pandas-tutorial/solved - 04 - Groupby operations",
    "ipython-cookbook/01_notebook",
    "ipython-cookbook/04_magic",
    "ipython-cookbook/07_test",
    "matplotlib-course/01-introduction",
    "matplotlib-course/03-scale-projection",
]

#: Notebooks that still differ under ``%%burst``, each with its causes as docs/fidelity.md numbers them. They
#: run all the same, as strict expected failures: a cause fixed turns its notebook's run into a failure until
#: it leaves this list, so the list (and the fidelity table) cannot overstate what differs.
DIFFERS: dict[str, str] = {}

#: Notebooks of projects no default run and no ``--corpus=all`` run touches (``--corpus=held-out`` runs
#: them). scientific-python-lectures: ``!`` lines naming files beside the notebook, a data file read by bare
#: name, a module a cell writes and the next imports, views of arrays changed across cells. seaborn and
#: formulaic (added unseen, after the work on the causes): seaborn's styles and contexts set by one cell and
#: drawn with by the next, ``with sns.axes_style(...)`` blocks, a plotting function defined once and called in
#: later cells, a seeded global random state; formulaic's formula naming a function the notebook defined,
#: stateful transforms defined and registered by type in the notebook, model specs kept and reused. lmfit and
#: xarray (added unseen, after those): a model of a function the notebook defined, fitted in one cell and its
#: result used in later ones, correlated uncertainties, a data file read by bare name; a library's options set
#: by a call (``xr.set_options``), a seeded global random state, seaborn on an xarray Dataset's frame. emcee
#: and corner (added unseen, after those): a sampler built on a log-probability function the notebook defined,
#: run in one cell (tqdm progress bar) and read in later ones, ``np.random.seed`` reseeded between cells, rcParams
#: and ``%config InlineBackend.figure_format`` set in a first cell, ``display(Math(...))``; a figure's axes
#: drawn over after it was made, seeded samples made in one cell and plotted in the next. python-control and
#: mapclassify (added unseen, after those): a module beside the notebook imported by name (``from pvtol import
#: ...``), systems built on update and output functions the notebook defined (one reading a gain from the
#: notebook's globals), simulated in one cell and plotted in later ones, ``np.random.seed`` before white noise,
#: ``!pip install`` in an ``except`` branch; a GeoDataFrame read from a shapefile another package ships,
#: classifiers shown as a cell's ``Out``, colormaps made in one cell and drawn with in later ones, large figures.
#: mesa and findiff (added unseen, after those): a model class imported from a module beside the notebook (``from
#: model import Schelling``), run step by step in one cell and its collected data read and plotted in later ones,
#: a batch run of that class; agent and model classes defined again in a later cell, CSV files the notebook
#: writes beside itself; functions and operators defined once and applied in later cells, a figure of several
#: axes; sympy expressions as each cell's ``Out`` (LaTeX), chained through ``_`` from cell to cell.
HELD_OUT = [
    "scientific-python-lectures/Lecture-1-Introduction-to-Python-Programming",
    "scientific-python-lectures/Lecture-2-Numpy",
    "seaborn/aesthetics",
    "seaborn/error_bars",
    "formulaic/model_specs",
    "formulaic/transforms",
    "lmfit/discuss_model_eval_uncertainty",
    "xarray/weather-data",
    "emcee/line",
    "corner/custom",
    "python-control/cds112-L7_kalman-pvtol",
    "python-control/cds110-L1_servomech-python",
    "mapclassify/06_api",
    "mapclassify/value_by_alpha",
    "mesa/analysis",
    "mesa/2_collecting_data",
    "findiff/examples-non-uniform-grids",
    "findiff/symbolic",
]

#: The notebooks run with every cell on one warm session (``--corpus=all``: all of them): a plotting one, one
#: that imports seaborn and one whose formula names a notebook function, of statsmodels; one of networkx;
#: a fitted Pipeline of imbalanced-learn; a figure built over several cells and seaborn (pydata-book ch09);
#: a data file read by relative path (pandas-tutorial); `!ls`, `_` and a file one cell writes and the next
#: reads (IPython Cookbook).
ON_SESSION = [
    "statsmodels/wls",
    "statsmodels/lowess",
    "statsmodels/glm_formula",
    "networkx/plot_karate_club",
    "imbalanced-learn/plot_pipeline_classification",
    "pydata-book/ch09",
    "pandas-tutorial/solved - 04 - Groupby operations",
    "ipython-cookbook/01_notebook",
]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    corpus = metafunc.config.getoption("--corpus")
    for fixture, subset in (("notebook", SUBSET), ("session_notebook", ON_SESSION)):
        if fixture in metafunc.fixturenames:
            names = [notebook_id(p) for p in discover()]
            if corpus == "held-out":
                names = [n for n in names if n in HELD_OUT]
            else:
                names = [n for n in names if n not in HELD_OUT and (corpus == "all" or n in subset)]
            metafunc.parametrize(fixture, [differing(n) if n in DIFFERS else n for n in names])


def differing(name: str) -> object:
    """A notebook of :data:`DIFFERS`: run, and expected to differ for the causes named there."""
    return pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=f"still differs: {DIFFERS[name]}"))


def test_the_subset_and_the_documented_variations_name_real_notebooks():
    everything = {notebook_id(p) for p in discover()}
    assert set(HELD_OUT) <= everything
    names = everything - set(HELD_OUT)
    # projects kept out of every other run
    held_out_only = {
        "seaborn",
        "formulaic",
        "scientific-python-lectures",
        "lmfit",
        "xarray",
        "emcee",
        "corner",
        "python-control",
        "mapclassify",
        "mesa",
        "findiff",
    }
    assert not held_out_only & {n.partition("/")[0] for n in names}
    assert set(SUBSET) <= names and set(ON_SESSION) <= names and set(VARIES) <= everything
    assert set(DIFFERS) <= names
    assert all(len(aspect_keys(aspects)) == len(aspects) for aspects in VARIES.values())  # names the harness knows
    projects = {n.partition("/")[0] for n in SUBSET}
    assert len(SUBSET) >= 15 and projects == {p.partition("/")[0] for p in names}


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_notebook_gives_the_same_results_under_burst(notebook: str):
    result = check(notebook, ignore=VARIES.get(notebook, {}))
    assert result.status == "identical", result.describe(limit=20)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_notebook_gives_the_same_results_with_its_cells_on_a_warm_session(session_notebook: str):
    """The same comparison, every cell on one warm session: forked from a parent that imported the modules
    the cells use, drew a figure and holds their inputs, each cell still gives what it gives plainly."""
    result = check(session_notebook, ignore=VARIES.get(session_notebook, {}), session=True)
    assert result.status == "identical", result.describe(limit=20)

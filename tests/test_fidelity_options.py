"""A library's options set by a call in one cell are in force in the next, under ``%%burst`` as plainly.

``np.set_printoptions(precision=4, suppress=True)`` in a notebook's first cell (pydata-book's chapters),
``xr.set_options(display_style=...)`` (xarray's weather-data example), ``np.seterr(...)``,
``decimal.getcontext().prec = 50``, ``csv.field_size_limit(...)``: process state held by the library, not by a
variable of the notebook.
Set on the machine, they must reach the kernel (which renders the cell's ``Out`` with them) and the next
machine; set in the kernel, they must reach the machine. Compared three ways (plainly; a new machine per
cell; one warm session), as tests/test_fidelity_patterns.py does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support.threeways import assert_identical

from nbburst.protocol import syspath

#: Prints what each option decides: an array's digits, a division by zero, the attributes an operation keeps,
#: a Decimal's digits, how xarray shows its objects; then shows a DataArray as the cell's ``Out``.
USE = (
    "print(np.array([1 / 3, 2e-9]), decimal.Decimal(1) / 7)\n"
    "try:\n    print(np.array([1.0]) / 0)\nexcept FloatingPointError as exc:\n    print('raised', exc)\n"
    "print((xr.DataArray([1, 2], dims='x', attrs={'unit': 'm'}) * 2).attrs, xr.get_options()['display_style'])\n"
    "print(sys.getrecursionlimit(), csv.field_size_limit())\n"
    "xr.DataArray([1, 2], dims='x')"
)


@pytest.mark.timeout(900)
def test_options_a_cell_sets_are_in_force_in_the_next_cell_on_either_side(burst_env, tmp_path):
    cells = [
        "import csv, decimal, sys\nimport numpy as np\nimport xarray as xr",
        "np.set_printoptions(precision=2, suppress=True)\nnp.seterr(divide='raise')\n"
        "xr.set_options(display_style='text', keep_attrs=True)\ndecimal.getcontext().prec = 6\n"
        "sys.setrecursionlimit(2345)\ncsv.field_size_limit(1000)",
        USE,  # on the next machine
        USE,  # in the kernel
        "np.set_printoptions(precision=3, suppress=False)\nnp.seterr(divide='ignore')\n"
        "xr.set_options(display_style='html', keep_attrs=False)\ndecimal.setcontext(decimal.Context(prec=4))\n"
        "csv.field_size_limit(2000)",
        USE,  # the kernel's, on a machine
        "with np.printoptions(precision=1), decimal.localcontext(prec=2), xr.set_options(keep_attrs=True):\n"
        "    print(np.array([1 / 3]), decimal.Decimal(1) / 7)",
        USE,  # a with block changes nothing after it
    ]
    plain = assert_identical(cells, {1, 2, 5, 6, 7}, tmp_path)
    assert plain[2]["stdout"].startswith("[0.33 0.  ] 0.142857\nraised divide by zero"), plain[2]
    assert plain[2]["stdout"].endswith("{'unit': 'm'} text\n2345 1000\n"), plain[2]
    assert plain[5]["stdout"] == "[3.333e-01 2.000e-09] 0.1429\n[inf]\n{} html\n2345 2000\n", plain[5]
    assert plain[7] == plain[5], (plain[5], plain[7])


#: What each variable is here, and what a program a ``!`` line starts sees of them.
SEE_ENV = (
    "print({k: os.environ.get(k) for k in NAMES}, os.environ['PATH'].split(os.pathsep).count('/nb/bin'))\n"
    '!echo "$NB_SET|$NB_GONE|$NB_KERNEL"'
)


@pytest.mark.timeout(900)
def test_environment_variables_a_cell_sets_or_removes_are_in_force_in_the_next_cell(burst_env, tmp_path):
    """``%env``, ``os.environ[...] =``, ``del``, ``pop``, ``PATH`` extended: set on the machine, they reach the
    kernel and the next machine; set in the kernel, the machine; and a variable the notebook set back to what
    the process started with, or removed, is so on the other side too."""
    cells = [
        "import os\nNAMES = ['NB_SET', 'NB_GONE', 'NB_KERNEL', 'NB_TWICE']\nos.environ['NB_GONE'] = 'there'",
        "%env NB_SET=from-a-cell\nos.environ['NB_TWICE'] = 'one'\ndel os.environ['NB_GONE']\n"
        "os.environ['PATH'] = '/nb/bin' + os.pathsep + os.environ['PATH']",
        SEE_ENV,  # on the next machine
        SEE_ENV,  # in the kernel
        "%env NB_KERNEL=kernel\nos.environ['NB_TWICE'] = 'two'",
        SEE_ENV,  # the kernel's, on a machine
        "os.environ.pop('NB_KERNEL')\nos.environ['NB_GONE'] = 'back'\nos.environ.update(NB_SET='changed')",
        SEE_ENV,
        "print(sorted(k for k in os.environ if not k.startswith('NBBURST_')))",  # and nothing of the machine's own
    ]
    plain = assert_identical(cells, {1, 2, 5, 6, 7}, tmp_path)
    assert plain[2]["stdout"].startswith("{'NB_SET': 'from-a-cell', 'NB_GONE': None"), plain[2]
    assert plain[7]["stdout"].rstrip().endswith("changed|back|"), plain[7]


def test_a_variable_the_notebook_extended_extends_the_other_sides_own(monkeypatch):
    """``PATH`` extended in the kernel is the machine's own ``PATH`` extended alike, and back; a variable
    replaced or new travels as its value, one removed as removed; nbburst's own stay where they are."""
    from nbburst.protocol import envvars

    def side(start: dict[str, str]) -> dict[str, str]:
        monkeypatch.setattr(envvars, "_base", dict(start))
        monkeypatch.setattr(envvars, "_applied", {"set": {}, "unset": []})
        monkeypatch.setattr(envvars.os, "environ", dict(start))
        return envvars.os.environ

    kernel = side({"PATH": "/k/bin:/usr/bin", "HOME": "/k", "LANG": "C", "NBBURST_ROOT": "/k/root"})
    kernel.update(PATH="/nb/bin:/k/bin:/usr/bin:/tail", LANG="C.UTF-8", NB_NEW="1", NBBURST_ROOT="/elsewhere")
    del kernel["HOME"]
    made = envvars.current()
    assert made == {"set": {"LANG": "C.UTF-8", "NB_NEW": "1", "PATH": ("/nb/bin:", ":/tail")}, "unset": ["HOME"]}

    machine = side({"PATH": "/m/bin", "HOME": "/m", "NBBURST_ATTEMPT": "j:1"})
    envvars.apply(made)
    assert machine == {"PATH": "/nb/bin:/m/bin:/tail", "LANG": "C.UTF-8", "NB_NEW": "1", "NBBURST_ATTEMPT": "j:1"}
    assert envvars.current() == made
    machine["PATH"] = "/nb/bin:/m/bin"  # the cell drops what the kernel had appended
    back = envvars.current()

    kernel = side({"PATH": "/k/bin:/usr/bin", "HOME": "/k", "LANG": "C"})
    envvars.apply(back)
    assert kernel == {"PATH": "/nb/bin:/k/bin:/usr/bin", "LANG": "C.UTF-8", "NB_NEW": "1"}

    # a side that started with the kernel's values (a machine started after they were set) has them once, and
    # sends them back as they are; one without the variable a change extends has the entries alone
    machine = side({"PATH": "/nb/bin:/k/bin:/usr/bin:/tail", "LANG": "C.UTF-8", "NB_NEW": "1"})
    envvars.apply(made)
    assert machine == {"PATH": "/nb/bin:/k/bin:/usr/bin:/tail", "LANG": "C.UTF-8", "NB_NEW": "1"}
    assert envvars.current()["set"] == {"LANG": "C.UTF-8", "NB_NEW": "1", "PATH": "/nb/bin:/k/bin:/usr/bin:/tail"}
    side({})
    envvars.apply({"set": {"PATH": ("/nb/bin:", ":/tail")}, "unset": []})
    assert envvars.os.environ == {"PATH": "/nb/bin:/tail"}


@pytest.mark.timeout(900)
def test_entries_a_cell_adds_to_sys_path_are_there_for_the_next_cells_imports(burst_env, tmp_path):
    """``sys.path.insert(0, ...)`` of a folder beside the notebook (absolute, as ``os.path.abspath`` makes it) in a
    ``%%burst`` cell: the next cell imports from it, there and in the kernel; one the kernel appends (relative),
    on the machine; the site-packages of either side stay its own."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "helper_a.py").write_text("X = 'a'\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "helper_b.py").write_text("Y = 'b'\n")
    cells = [
        "import os, sys",
        "sys.path.insert(0, os.path.abspath('src'))",
        "import helper_a\nprint(helper_a.X, sys.path[0] == os.path.abspath('src'))",
        "print(sys.path[0] == os.path.abspath('src'))",
        "sys.path.append('lib')",
        "import helper_b\nprint(helper_b.Y, sys.path[0] == os.path.abspath('src'), sys.path[-1])",
    ]
    plain = assert_identical(cells, {1, 2, 5}, tmp_path)
    assert plain[5]["stdout"] == "b True lib\n", plain[5]


def test_a_path_entry_added_as_a_path_object_travels_and_stays(monkeypatch, tmp_path):
    """``sys.path.append(Path("lib"))``: the entry travels as the path it names, and the kernel keeps its own
    object when the machine's entries come back (the cell appended another)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", ["/base"])
    monkeypatch.setattr(syspath, "_base", None)
    assert syspath.current() == {"front": [], "back": []}
    sys.path.append(Path("lib"))
    assert syspath.current() == {"front": [], "back": ["lib"]}
    syspath.apply({"front": [], "back": ["lib", "more"]})
    assert sys.path == ["/base", Path("lib"), "more"]


#: Accessors of the notebook's own, on pandas' DataFrame and on xarray's Dataset.
FRAME_ACCESSOR = (
    "@pd.api.extensions.register_dataframe_accessor('geo')\n"
    "class Geo:\n    def __init__(self, obj):\n        self._obj = obj\n"
    "    @property\n    def centre(self):\n        return (self._obj.lat.mean(), self._obj.lon.mean())"
)
SET_ACCESSOR = (
    "@xr.register_dataset_accessor('geo')\n"
    "class GeoSet:\n    def __init__(self, obj):\n        self._obj = obj\n"
    "    def extent(self):\n        return float(self._obj.lat.max() - self._obj.lat.min())"
)
USE_EXTENSIONS = (
    "print(df.progress_apply(lambda c: c.sum()).tolist(), df.lat.progress_map(abs).tolist())\n"
    "print(df.groupby('k').progress_apply(len).tolist())\n"
    "print(df.geo.centre, ds.geo.extent(), 'geo' in dir(df))"
)


@pytest.mark.timeout(900)
def test_methods_and_accessors_a_cell_adds_to_library_classes_are_there_in_the_next_cell(burst_env, tmp_path):
    """``tqdm.pandas()`` (pandas' objects gain ``progress_apply``...) and accessors registered on a class the
    notebook defines: added in the kernel, a machine's cell uses them; added on a machine, the kernel's next
    cell and the next machine do."""
    cells = [
        "import pandas as pd\nimport xarray as xr\nfrom tqdm.auto import tqdm\n"
        "df = pd.DataFrame({'lat': [1.0, -3.0, 5.0], 'lon': [2.0, 4.0, 6.0], 'k': [0, 1, 1]})\n"
        "ds = xr.Dataset.from_dataframe(df)\n" + FRAME_ACCESSOR,
        # on a machine: the kernel's accessor used, methods and an accessor added
        "print(df.geo.centre)\ntqdm.pandas(disable=True)\n" + SET_ACCESSOR,
        USE_EXTENSIONS,  # in the kernel
        USE_EXTENSIONS,  # on the next machine
    ]
    plain = assert_identical(cells, {1, 3}, tmp_path)
    assert plain[2]["stdout"] == plain[3]["stdout"], plain
    assert plain[3]["stdout"].endswith("(np.float64(1.0), np.float64(4.0)) 8.0 True\n"), plain[3]


@pytest.mark.timeout(900)
def test_python_controls_defaults_and_the_names_of_its_systems_go_on_where_the_other_side_left_them(
    burst_env, tmp_path
):
    """python-control names each unnamed system ``sys[N]`` from a counter its class holds: a system made on a
    machine was named like one the kernel had made already, and ``ct.interconnect`` could not tell them apart
    (the held-out kalman-pvtol notebook). Its defaults (``ct.set_defaults``) are library options as well."""
    pytest.importorskip("control")
    cells = [
        "import control as ct\ns1 = ct.ss([[-1]], [[1]], [[1]], [[0]])\nprint(s1.name)",
        "s2 = ct.ss([[-2]], [[1]], [[1]], [[0]])\nct.set_defaults('freqplot', dB=True)",  # on a machine
        "s3 = ct.ss([[-3]], [[1]], [[1]], [[0]])\nprint(s2.name, s3.name, ct.defaults['freqplot.dB'])",
        "s4 = ct.tf([1], [1, 4])\nprint(s4.name, ct.defaults['freqplot.dB'])",  # the kernel's, on a machine
    ]
    plain = assert_identical(cells, {1, 3}, tmp_path)
    assert plain[2]["stdout"] == "sys[1] sys[2] True\n", plain[2]
    assert plain[3]["stdout"] == "sys[3] True\n", plain[3]

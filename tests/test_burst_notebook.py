"""%%burst in real kernels (nbclient), on the local backend: what a user sees."""

from __future__ import annotations

import pytest
from support import jobs_in
from support.nbrun import data, error, run_cells, stream

from nbburst.client.burst import Burst
from nbburst.protocol.job import State

LOAD = "%load_ext nbburst"


def test_values_come_back_like_a_local_run(burst_env):
    outs = run_cells(
        [
            LOAD,
            "import numpy as np\nbase = np.arange(5)\ncounter = 10\nstale = 'bye'",
            "%%burst\n"
            "import numpy as np\n"
            "from collections import OrderedDict as OD\n"
            "total = base.sum()\n"
            "counter += 1\n"
            "for i in range(3): pass\n"
            "with open(__file__ if '__file__' in dir() else 'x.txt', 'w') as fh: fh.write('hi')\n"
            "if (w := counter * 2) > 0: pass\n"
            "squares = [int(n * n) for n in base]\n"
            "del stale\n"
            "int(total) * 2",
            "print(total, counter, i, w, squares, OD.__name__, np.__name__, 'fh' in dir(), 'stale' in dir())",
            "%%burst --out kept\nkept = 1\ndropped = 2",
            "print(kept, 'dropped' in dir())",
        ]
    )
    assert error(outs[2]) is None, error(outs[2])
    assert data(outs[2], "execute_result")[0]["text/plain"] == "20"
    assert stream(outs[3]).split() == [
        "10",
        "11",
        "2",
        "22",
        "[0,",
        "1,",
        "4,",
        "9,",
        "16]",
        "OrderedDict",
        "numpy",
        "True",  # fh: a closed file comes back closed, as a plain cell leaves it
        "False",
    ]
    assert "was not brought back" not in stream(outs[2], "stderr")
    assert stream(outs[5]).split() == ["1", "False"]


def test_notebook_class_and_closure_by_value_and_identity(burst_env):
    outs = run_cells(
        [
            LOAD,
            "class Point:\n    def __init__(self, x): self.x = x\n    def double(self): return Point(self.x * 2)\n"
            "scale = 3\nmul = lambda v: v * scale\n"
            "def make_adder(k):\n    return lambda v: v + k\nadd5 = make_adder(5)",
            "%%burst\np = Point(2).double()\nvalues = [mul(1), add5(1)]\nq = p",
            "print(type(p) is Point, isinstance(q, Point), p is q, p.x, values)",
        ]
    )
    assert error(outs[2]) is None, error(outs[2])
    assert stream(outs[3]).split() == ["True", "True", "True", "4", "[3,", "6]"]


def test_output_from_python_c_and_subprocesses(burst_env):
    outs = run_cells(
        [
            LOAD,
            "%%burst\nimport ctypes, os, sys, subprocess\n"
            "print('from python')\n"
            "ctypes.CDLL(None).printf(b'from C\\n')\n"
            "os.system('echo from a shell')\n"
            "subprocess.run([sys.executable, '-c', 'print(\"from a child python\")'])\n"
            "print('to stderr', file=sys.stderr)",
        ]
    )
    assert error(outs[1]) is None, error(outs[1])
    out = stream(outs[1])
    for line in ("from python", "from C", "from a shell", "from a child python"):
        assert line in out
    assert "to stderr" in stream(outs[1], "stderr")


def test_rich_outputs_appear_as_they_would_locally(burst_env):
    outs = run_cells(
        [
            LOAD,
            "%%burst\n"
            "import pandas as pd, matplotlib.pyplot as plt\n"
            "from IPython.display import HTML\n"
            "display(HTML('<b>bold</b>'))\n"
            "plt.plot([1, 3, 2])\n"
            "plt.show()\n"
            "print('after the plot')\n"
            "pd.DataFrame({'a': [1, 2]})",
        ]
    )
    assert error(outs[1]) is None, error(outs[1])
    kinds = [o["output_type"] for o in outs[1]]
    shown = data(outs[1])
    assert shown[0]["text/html"] == "<b>bold</b>"
    assert shown[1]["image/png"].startswith("iVBOR")  # a PNG
    assert kinds.index("stream") > 1  # printed after the two displays, in order
    assert "<table" in data(outs[1], "execute_result")[0]["text/html"]


def test_ipython_syntax_works_remotely(burst_env):
    outs = run_cells([LOAD, "%%burst\n!echo from-bang\n%time x = sum(range(10))\nfiles = %sx echo listed\nx"])
    assert error(outs[1]) is None, error(outs[1])
    text = stream(outs[1])
    assert "from-bang" in text and "Wall time" in text
    assert data(outs[1], "execute_result")[0]["text/plain"] == "45"


def test_remote_exception_is_raised_with_the_cells_lines(burst_env):
    outs = run_cells(
        [
            LOAD,
            "%%burst\ndef inner(v):\n    return 1 / v\n\nresult = inner(0)",
            "class Custom(Exception): pass",
            "%%burst\nraise Custom('it broke', 42)",
        ]
    )
    ename, evalue, tb = error(outs[1])
    assert ename == "ZeroDivisionError" and evalue == "division by zero"
    assert "result = inner(0)" in tb and "return 1 / v" in tb
    ename, evalue, _ = error(outs[3])
    assert ename == "Custom" and "it broke" in evalue


@pytest.mark.parametrize(
    "setup, name, kind",
    [
        ("import threading\nthing = threading.Lock()", "thing", "lock"),
        ("thing = open(__import__('os').devnull, 'w')", "thing", "TextIOWrapper"),  # a file travels, a device not
        ("thing = (i for i in range(3))", "thing", "generator"),
        ("import sqlite3\nthing = sqlite3.connect(':memory:')", "thing", "Connection"),
    ],
)
def test_unpicklable_input_is_refused_before_launch(burst_env, setup, name, kind):
    outs = run_cells([LOAD, setup, f"%%burst\nprint({name})"])
    ename, evalue, _ = error(outs[2])
    assert ename == "CaptureError"
    assert repr(name) in evalue and kind in evalue and "Fix:" in evalue
    assert jobs_in(burst_env) == []  # no job folder; burst_env checks that no process is left


@pytest.mark.parametrize(
    "line, message",
    [
        ("--bogus 3", "unrecognized arguments: --bogus"),
        ("--timeout 5x", "--timeout: '5x' is not a duration"),
        ("--cores 0", "--cores: must be a whole number"),
        ("--cores 4096", "--cores 4096: this machine has only"),
        ("--zone us-central1-a", "--zone applies to Compute Engine machines only"),
        ("--gpu nvidia-l4", "--gpu: the local backend has no GPUs"),
        ("--image-family a --image b", "--image and --image-family exclude each other"),
        ("--out 1x", "--out: '1x' is not a Python variable name"),
        ("--name Bad_Name", "--name: 'Bad_Name' is not a valid job name"),
        ("--workers 0", "--workers: must be at least 1"),
    ],
)
def test_bad_options_are_usage_errors_and_launch_nothing(burst_env, line, message):
    outs = run_cells([LOAD, f"%%burst {line}\nx = 1"])
    ename, evalue, tb = error(outs[1])
    assert message in evalue, evalue
    assert "Traceback" not in tb  # one clear line, not a stack
    assert jobs_in(burst_env) == []


def test_unchanged_data_is_not_uploaded_twice(burst_env):
    outs = run_cells(
        [
            LOAD,
            "import numpy as np\nbig = np.random.default_rng(0).random(2_000_000)",
            "%%burst\ns = float(big.sum())",
            "import os\nblobs = sorted(os.listdir(os.environ['NBBURST_ROOT'] + '/blobs'))\n"
            "stamps = {b: os.stat(os.environ['NBBURST_ROOT'] + '/blobs/' + b).st_ino for b in blobs}",
            "%%burst\ns2 = float(big.sum())",
            "print(sorted(os.listdir(os.environ['NBBURST_ROOT'] + '/blobs')) == blobs, "
            "all(os.stat(os.environ['NBBURST_ROOT'] + '/blobs/' + b).st_ino == i for b, i in stamps.items()))",
            "big[123] += 1.0",
            "%%burst\ns3 = float(big.sum())",
            "print(len(os.listdir(os.environ['NBBURST_ROOT'] + '/blobs')) - len(blobs), s == s2, s3 != s)",
        ]
    )
    for i in (2, 4, 7):
        assert error(outs[i]) is None, error(outs[i])
    assert stream(outs[5]).split() == ["True", "True"]  # same blobs, same files: nothing rewritten
    assert stream(outs[8]).split() == ["1", "True", "True"]  # one changed element: one new blob


def test_cores_are_enforced(burst_env):
    outs = run_cells(
        [
            LOAD,
            "%%burst --cores 1\nimport os, joblib\n"
            "seen = (joblib.cpu_count(), len(os.sched_getaffinity(0)), os.environ['OMP_NUM_THREADS'],\n"
            "        os.environ['LOKY_MAX_CPU_COUNT'])\n"
            "from joblib import Parallel, delayed\n"
            "workers = len(set(Parallel(n_jobs=-1)(delayed(os.getpid)() for _ in range(8))))",
            "print(seen, workers)",
        ]
    )
    assert error(outs[1]) is None, error(outs[1])
    assert stream(outs[2]).strip() == "(1, 1, '1', '1') 1"


def test_timeout_kills_the_cell_and_its_children(burst_env):
    outs = run_cells(
        [
            LOAD,
            "%%burst --timeout 3s\nimport subprocess, time\n"
            "child = subprocess.Popen(['sleep', '300'])\n"
            "open('child.pid', 'w').write(str(child.pid))\n"
            "print('started', flush=True)\ntime.sleep(300)",
        ]
    )
    ename, evalue, _ = error(outs[1])
    assert ename == "JobFailed" and "timed out" in evalue and "3s" in evalue
    assert "started" in stream(outs[1])
    job = Burst().jobs()[0]
    assert job.state == State.FAILED
    pid = int(next(burst_env["state"].glob("machines/work/*/*/child.pid")).read_text())  # work/<job>/<folder>
    import psutil

    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_detach_then_cancel(burst_env):
    outs = run_cells(
        [
            LOAD,
            "%%burst --detach --name long-one\nimport time\nprint('working', flush=True)\ntime.sleep(300)\nx = 1",
            "import time\njob = _\nwhile job.state.value != 'RUNNING': time.sleep(0.1)",
            "%burst cancel long-one",
            "print(job.state.value)\ntry:\n    job.result()\nexcept Exception as e:\n    print(type(e).__name__)",
        ]
    )
    assert "long-one" in stream(outs[1])
    assert error(outs[3]) is None, error(outs[3])
    assert "CANCELLED" in stream(outs[3])
    assert stream(outs[4]).split() == ["CANCELLED", "JobCancelled"]

"""Options shared by the magic, the API and the CLI."""

import re
from pathlib import Path

import pytest

from nbburst.errors import UsageError
from nbburst.options import API_OPTIONS, CELL_OPTIONS, REGENERATE, Options, parse_gpu, parse_names, reference
from nbburst.protocol.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("90s", 90),
        ("30m", 1800),
        ("2h", 7200),
        ("1h30m", 5400),
        ("1d", 86400),
        (45, 45),
        ("2.5h", 9000),
        ("500ms", 0.5),
    ],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "h", "2h 3x", "-5m", "0s"])
def test_bad_durations_name_the_option(text):
    with pytest.raises(UsageError, match="--timeout"):
        parse_duration(text)


def test_gpu_and_names():
    assert parse_gpu("nvidia-l4") == ("nvidia-l4", 1)
    assert parse_gpu("nvidia-tesla-t4:2") == ("nvidia-tesla-t4", 2)
    with pytest.raises(UsageError, match="1, 2, 4, 8 or 16"):
        parse_gpu("nvidia-l4:3")
    assert parse_names("a, b") == ["a", "b"]
    with pytest.raises(UsageError, match="not a Python variable name"):
        parse_names("a,2b")


def test_build_validates_every_option():
    opts = Options.build(cores=8, memory=32, timeout="2h", gpu="nvidia-l4:2", name="my-job", out="m")
    assert (opts.resources.cores, opts.resources.gpu_count, opts.timeout_s, opts.out) == (8, 2, 7200, ["m"])
    with pytest.raises(UsageError, match="--backend"):
        Options.build(backend="azure")
    with pytest.raises(UsageError, match="--max-restarts"):
        Options.build(max_restarts=-1)
    assert format_duration(3725) == "1h 02m"


def test_each_front_end_is_made_from_the_one_declaration():
    """The %%burst flags, nbburst.submit's keywords and the configured defaults all come from CELL_OPTIONS."""
    import inspect

    import nbburst
    from nbburst import config
    from nbburst.ui.magic import BurstMagics

    usage = BurstMagics.burst.parser.format_usage()
    assert re.findall(r"\[(--[a-z-]+)", usage) == [option.flag for option in CELL_OPTIONS]
    keywords = inspect.signature(nbburst.submit).parameters.values()
    assert [p.name for p in keywords if p.kind == p.KEYWORD_ONLY] == [option.name for option in API_OPTIONS]
    assert {o.name for o in CELL_OPTIONS if o.configured} <= set(config.NBBurst.class_trait_names())
    with pytest.raises(TypeError, match="no option cpus"):
        Options.build(cpus=4)


def test_the_options_reference_is_up_to_date():
    doc = Path(__file__).resolve().parent.parent / "docs" / "options.md"
    assert doc.exists() and doc.read_text() == reference(), f"docs/options.md is out of date; run `{REGENERATE}`"

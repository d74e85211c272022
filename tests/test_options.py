"""Options shared by the magic, the API and the CLI."""

import pytest

from nbburst.errors import UsageError
from nbburst.options import Options, parse_gpu, parse_names
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

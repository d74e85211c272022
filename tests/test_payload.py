"""Blobs: zero-copy pickling, SHA-256 tree addresses, fingerprints."""

import hashlib

import numpy as np
import pytest

from nbburst.protocol import payload


def test_round_trip_keeps_arrays_writable_and_equal():
    value = {"a": np.arange(1000.0), "nested": [np.ones((3, 4), dtype=np.int32)], "s": "text"}
    enc = payload.encode(value)
    back = payload.decode(bytearray(enc.tobytes()))
    assert np.array_equal(back["a"], value["a"]) and back["a"].flags.writeable
    assert back["nested"][0].dtype == np.int32 and back["s"] == "text"


def test_large_arrays_travel_out_of_band_without_copies():
    arr = np.zeros(1 << 20)
    enc = payload.encode(arr)
    assert any(p.obj is arr or getattr(p, "obj", None) is not None and p.nbytes == arr.nbytes for p in enc.parts)
    assert enc.nbytes >= arr.nbytes


def test_digest_is_a_sha256_tree_independent_of_how_bytes_are_split(monkeypatch):
    monkeypatch.setattr(payload, "TREE_CHUNK", 1000)
    data = bytes(range(256)) * 20  # 5120 bytes = 6 chunks
    whole = payload.digest([memoryview(data)])
    split = payload.digest([memoryview(data[:7]), memoryview(data[7:3333]), memoryview(data[3333:])])
    leaves = b"".join(hashlib.sha256(data[i : i + 1000]).digest() for i in range(0, len(data), 1000))
    assert whole == split == hashlib.sha256(leaves).hexdigest()


def test_fingerprint_changes_with_one_byte():
    arr = np.zeros(100_000)
    before = payload.fingerprint(payload.encode(arr).parts)
    arr[5000] = 1e-300
    assert payload.fingerprint(payload.encode(arr).parts) != before


def test_truncated_blob_is_refused():
    data = payload.encode(np.arange(10)).tobytes()
    with pytest.raises(payload.BlobError):
        payload.decode(bytearray(data[:-3]))
    with pytest.raises(payload.BlobError):
        payload.decode(b"not a blob at all")


def test_a_function_shipped_by_value_keeps_its_file_and_lines(tmp_path, monkeypatch):
    """A function written beside the notebook travels by value; raising on the other side, its traceback names
    its file and line (cloudpickle 3.1.3 alone names every such function's file ``<dynamic-code>``)."""
    import importlib
    import sys
    import traceback

    import cloudpickle

    (tmp_path / "helpers_beside.py").write_text("def fail():\n    raise ValueError('no good')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("helpers_beside")
    cloudpickle.register_pickle_by_value(module)
    try:
        encoded = payload.encode(module.fail)
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    (tmp_path / "helpers_beside.py").unlink()  # the other side has no such module: it came by value
    monkeypatch.delitem(sys.modules, "helpers_beside")
    shipped = payload.decode(bytearray(encoded.tobytes()))
    assert shipped.__code__.co_filename == str(tmp_path / "helpers_beside.py")
    with pytest.raises(ValueError) as raised:
        shipped()
    assert 'helpers_beside.py", line 2, in fail' in "".join(traceback.format_tb(raised.tb))

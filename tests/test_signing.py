"""HMAC signing of pickles and the client's key ring."""

import os
import stat

import pytest

from nbburst.protocol import signing


def test_sign_and_verify():
    key = signing.new_key()
    assert signing.verify(key, signing.sign(key, b"payload")) == b"payload"


@pytest.mark.parametrize(
    "mangle",
    [
        lambda s: s[:-1] + bytes([s[-1] ^ 1]),  # one bit of the payload
        lambda s: s[:10] + bytes([s[10] ^ 1]) + s[11:],  # one bit of the tag
        lambda s: s[len(signing.MAGIC) + 32 :],  # signature stripped
        lambda s: b"",
    ],
)
def test_tampering_is_detected(mangle):
    key = signing.new_key()
    with pytest.raises(signing.SignatureError, match="refusing to load"):
        signing.verify(key, mangle(signing.sign(key, b"some pickle bytes")), "result")


def test_another_jobs_key_is_refused():
    with pytest.raises(signing.SignatureError, match="another job's key"):
        signing.verify(signing.new_key(), signing.sign(signing.new_key(), b"x"))


def test_text_signatures_for_specs():
    key = signing.new_key()
    sig = signing.sign_text(key, b"spec")
    signing.verify_text(key, b"spec", sig, "spec")
    with pytest.raises(signing.SignatureError, match="refusing to run"):
        signing.verify_text(key, b"spec2", sig, "spec")


def test_key_ring_is_private_and_create_only(tmp_path):
    ring = signing.KeyRing(tmp_path / "keys")
    key = ring.create("b20260101-000000-abcdef")
    assert ring.get("b20260101-000000-abcdef") == key
    mode = stat.S_IMODE(os.stat(tmp_path / "keys" / "b20260101-000000-abcdef.key").st_mode)
    assert mode == 0o600
    with pytest.raises(FileExistsError):
        ring.create("b20260101-000000-abcdef")
    with pytest.raises(signing.SignatureError, match="no signing key"):
        ring.get("b20260101-000000-000000")

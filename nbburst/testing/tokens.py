"""Access tokens of the emulated metadata servers, which name the service account they were minted for.

A real access token is opaque: Google's APIs look up whose it is. The stand-ins here (Secret Manager) do the
same from the token itself, so a VM's request is judged as its service account's, and a token nobody minted
is refused (401) as Google refuses one it does not know.
"""

from __future__ import annotations

import base64
import secrets

_PREFIX = "ya29.emulated-"


def mint(email: str) -> dict[str, object]:
    """The metadata server's answer at ``service-accounts/EMAIL/token`` for ``email``."""
    holder = base64.urlsafe_b64encode(email.encode()).rstrip(b"=").decode()
    token = f"{_PREFIX}{holder}.{secrets.token_urlsafe(24)}"
    return {"access_token": token, "expires_in": 3599, "token_type": "Bearer"}


def holder(token: str) -> str | None:
    """The e-mail of the service account ``token`` was minted for; None for a token no emulator minted."""
    if not token.startswith(_PREFIX) or "." not in token[len(_PREFIX) :]:
        return None
    encoded = token[len(_PREFIX) :].split(".", 1)[0]
    try:
        return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        return None

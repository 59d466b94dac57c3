"""Per-install secrets (SPEC §11): generated on first start into the data directory, never in the repo.

`SECRET_KEY` signs sessions and CSRF tokens; `PII_FINGERPRINT_KEY` keys the HMAC fingerprints of
blocked secrets and PII that auditors see. Each comes from its environment variable when set, else
from its own file in the data directory (`.data/secret_key`, `.data/pii_fingerprint_key`, mode 0600),
created with a fresh random value the first time. They are independent: knowing one (or the public
development default of older versions) tells nothing about the other, so a fingerprint cannot be
tested against guessed phone numbers without the server's own key.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

# Keys that were ever public (an old default) or are placeholders: never accepted with DEBUG off.
PUBLIC_KEYS = frozenset(
    {
        "dev-only-insecure-secret-key-change-me-in-production-0123456789",
        "change-me",
        "changeme",
        "secret",
        "insecure",
    }
)


def install_secret(data_dir: Path, name: str, env_value: str | None) -> str:
    """The secret from the environment, else from `data_dir/name` (created, 0600, on first use).

    Processes starting together on a fresh install (web workers, the Celery worker, beat) agree on one
    value: each writes its candidate to a private temporary file and links it into place, which only
    the first one can do; the others read the winner's complete file."""
    if env_value:
        return env_value
    path = Path(data_dir) / name
    for _ in range(3):
        try:
            if path.stat().st_mode & 0o077:
                os.chmod(path, 0o600)
            value = path.read_text().strip()
            if value:
                return value
            path.unlink()  # an empty file (a crash of an older version): replace it
        except FileNotFoundError:
            pass
        tmp = path.with_name(f".{name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(64) + "\n")
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    value = path.read_text().strip()
    if not value:
        raise RuntimeError(f"could not create {path}")
    return value


def weak_key_reason(value: str) -> str | None:
    """Why `value` must not sign anything in production, else None."""
    if not value:
        return "is empty"
    if value in PUBLIC_KEYS or value.startswith("django-insecure") or "change-me" in value:
        return "is a public default"
    if len(value) < 50 or len(set(value)) < 5:
        return "is too short (at least 50 characters, 5 distinct)"
    return None

"""The course secret behind the hidden cases: one file, kept outside the repository.

Each student's hidden inputs come from a key derived from the secret, the assignment and
the student (:func:`student_key`); the kernel that grades a student receives only that
key, never the secret. With the same secret a regrade draws the same inputs, so the same
notebook gets the same grade; without it nobody can know the inputs in advance. Keep the
file with the gradebook's backups and out of every repository: losing it means regrades
draw new inputs.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

#: Where the secret lives unless ``--secret-file`` or ``AUTOGRADER_SECRET_FILE`` says otherwise.
DEFAULT_PATH = Path("~/.config/attention-course/grading-secret")


def default_path() -> Path:
    return Path(os.environ.get("AUTOGRADER_SECRET_FILE") or DEFAULT_PATH).expanduser()


def load_or_create(path: Path) -> tuple[bytes, bool]:
    """``(secret, created)``: the secret in ``path``, made (readable by its owner only) if missing.

    Raises:
        ValueError: the file exists but holds no secret.
    """
    path = path.expanduser()
    if path.exists():
        secret = path.read_text(encoding="ascii").strip()
        if len(secret) < 32:
            raise ValueError(f"the grading secret {path} is empty or too short; delete it to make a new one "
                             "(regrades will then draw new hidden inputs)")
        return secret.encode(), False
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_hex(32)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="ascii") as handle:
        handle.write(secret + "\n")
    return secret.encode(), True


def student_key(secret: bytes, assignment: str, student: str) -> str:
    """The key of one student's hidden cases in one assignment (HMAC-SHA256, hex)."""
    return hmac.new(secret, f"{assignment}/{student}".encode(), hashlib.sha256).hexdigest()


def fingerprint(secret: bytes) -> str:
    """A digest that changes when the secret does (for the record of what was graded)."""
    return hashlib.sha256(b"grading-secret/" + secret).hexdigest()

"""One error type for every inventory mistake, printed as `FILE:LINE: key: what — fix`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class InventoryError(Exception):
    """A located mistake in an inventory file.

    `line` is 1-based and None when the mistake has no place in the file (a missing file).
    `key_path` is dotted (`hosts[1].gpus`); `hint` says what to write instead.
    """

    path: str
    line: int | None
    key_path: str
    message: str
    hint: str = ""

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        key = f" {self.key_path}:" if self.key_path else ""
        hint = f" — {self.hint}" if self.hint else ""
        return f"{where}:{key} {self.message}{hint}"


ErrorFactory = Callable[[tuple[str | int, ...], str, str], InventoryError]
"""Makes the error for a key of the file (its path, as `yamlmarks.PathKey`), what is wrong and
the fix: the loader's, which finds the key's line."""

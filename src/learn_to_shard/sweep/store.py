"""Where sweep rows live: an append-only journal, and the Parquet and CSV files made from it.

The journal ``rows.jsonl`` holds one JSON row per line. Each finished cell's row is appended
as one line, flushed and fsynced before the next cell's row, so killing a sweep (even with
SIGKILL) loses at most the cells still running; a line cut short by the kill is dropped when
the journal is read again. ``results.parquet`` and ``results.csv`` are rewritten from the
journal (atomically: a temporary file, then a rename) at the end of every run, also an
interrupted one. Resuming reads the journal's keys and skips those cells.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO

from ..errors import ConfigError
from .cells import COLUMNS

JOURNAL = "rows.jsonl"
PARQUET = "results.parquet"
CSV = "results.csv"


def read_journal(path: Path) -> list[dict[str, object]]:
    """The rows of a journal (none if it does not exist); a last line cut short by a kill is
    removed from the file.

    Raises:
        ConfigError: a complete line that is not UTF-8, not JSON, or not a row object with a
            ``key``.
    """
    if not path.exists():
        return []
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):            # the writer was killed mid-line
        data = data[: data.rfind(b"\n") + 1]
        with path.open("r+b") as fh:
            fh.truncate(len(data))
    rows = []
    for i, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: line {i} is not UTF-8 text; remove the line or the "
                              f"file to run those cells again") from None
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: line {i} is not JSON ({exc.msg}); remove the line or "
                              f"the file to run those cells again") from None
        if not isinstance(row, dict) or not isinstance(row.get("key"), str):
            raise ConfigError(f"{path}: line {i} is not a sweep row (no 'key')")
        rows.append(row)
    return rows


class Journal:
    """Appends rows to ``rows.jsonl``, one durable line per row (see the module docstring).

    Raises:
        ConfigError: the folder cannot be created or the file cannot be opened.
    """

    def __init__(self, folder: Path) -> None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._fh: IO[str] = (folder / JOURNAL).open("a", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--out: cannot write {folder / JOURNAL}: {exc.strerror}") \
                from None

    def append(self, row: Mapping[str, object]) -> None:
        """Write one row and force it to disk."""
        self._fh.write(json.dumps(dict(row), allow_nan=False, separators=(",", ":")) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        """Close the file."""
        self._fh.close()


def _schema():  # -> pyarrow.Schema
    import pyarrow as pa

    kinds = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}
    return pa.schema([(name, kinds[t]) for name, t in COLUMNS])


def write_tables(rows: Iterable[Mapping[str, object]], folder: Path) -> tuple[Path, Path]:
    """Write ``results.parquet`` and ``results.csv`` (columns :data:`COLUMNS`, in order).

    Returns:
        The two paths.
    """
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    names = [n for n, _ in COLUMNS]
    table = pa.Table.from_pylist([{n: r.get(n) for n in names} for r in rows],
                                 schema=_schema())
    out = []
    for name, write in ((PARQUET, pq.write_table), (CSV, pcsv.write_csv)):
        path = folder / name
        tmp = folder / (name + ".tmp")
        write(table, tmp)
        os.replace(tmp, path)
        out.append(path)
    return out[0], out[1]


def read_parquet(path: Path) -> list[dict[str, object]]:
    """The rows of a ``results.parquet`` file."""
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()

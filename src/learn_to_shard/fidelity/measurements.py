"""Measurement rows: the CSV table of published measurements and its row model.

The table (``learn_to_shard/data/measurements.csv``, columns documented in the ``README.md``
beside it) holds one measurement per row with the configuration it was taken under. Metric
kinds: ``output_tokens_per_s`` (throughput), ``prefill_s`` / ``ttft_s`` (TTFT),
``decode_step_s`` / ``tpot_s`` (TPOT), ``collective_s`` / ``link_bytes_per_s`` (collective).
"""

from __future__ import annotations

import csv
import difflib
import math
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ..cost.comm import ALL_REDUCE, ALL_TO_ALL, GATHER_OR_SCATTER
from ..cost.config import ENGINE_PROFILES
from ..errors import ConfigError

__all__ = ["COLUMNS", "METRIC_KIND", "KINDS", "KIND_LABEL", "COLLECTIVES", "PRECISIONS",
           "CALIBRATION_FLAGS", "Measurement", "beside", "looks_like_path",
           "load_table", "default_table_path", "data_dir"]

#: Columns of the measurement CSV, in order (see data/README.md).
COLUMNS: tuple[str, ...] = (
    "id", "engine", "model", "hardware", "devices", "weight_dtype", "kv_dtype", "tp", "pp",
    "ep", "dp", "batch", "max_batch", "max_num_tokens", "isl", "osl", "metric", "value",
    "collective", "message_bytes", "sweep", "calibration", "source", "notes",
)
_REQUIRED = ("id", "model", "hardware", "metric", "value")

#: Values of the ``weight_dtype`` and ``kv_dtype`` columns (fp16 is priced as bf16, which has
#: its rate and size on every shipped device; data/README.md).
PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "bfloat16", "float16", "fp8")
#: Values of the ``calibration`` column (lower-cased; empty = held out).
CALIBRATION_FLAGS: tuple[str, ...] = ("", "0", "1", "true", "false", "yes", "no")

#: metric -> kind (the four kinds the summary reports).
METRIC_KIND: dict[str, str] = {
    "output_tokens_per_s": "throughput",
    "prefill_s": "ttft",
    "ttft_s": "ttft",
    "decode_step_s": "tpot",
    "tpot_s": "tpot",
    "collective_s": "collective",
    "link_bytes_per_s": "collective",
}
KINDS: tuple[str, ...] = ("throughput", "ttft", "tpot", "collective")
KIND_LABEL = {"throughput": "throughput", "ttft": "TTFT / prefill", "tpot": "decode step / TPOT",
              "collective": "collective"}
#: Collective name in the table -> the cost model's collective kind code.
COLLECTIVES = {"all_reduce": ALL_REDUCE, "all_gather": GATHER_OR_SCATTER,
               "reduce_scatter": GATHER_OR_SCATTER, "all_to_all": ALL_TO_ALL}


def data_dir() -> Any:
    """The package's data folder (an importlib.resources Traversable)."""
    return resources.files("learn_to_shard") / "data"


def default_table_path() -> Path:
    """The shipped table, ``learn_to_shard/data/measurements.csv``."""
    return Path(str(data_dir() / "measurements.csv"))


@dataclass(frozen=True)
class Measurement:
    """One row of the table (SI units; see data/README.md for every column)."""

    id: str
    engine: str
    model: str
    hardware: str
    devices: int
    weight_dtype: str
    kv_dtype: str
    tp: int
    pp: int
    ep: int
    dp: int
    batch: int | None          # None = as many as the KV cache holds ("max")
    max_batch: int | None      # engine cap for batch = max
    max_num_tokens: int | None  # engine cap on tokens per step (None: the profile's budget)
    isl: int
    osl: int
    metric: str
    value: float
    collective: str
    message_bytes: float
    sweep: str
    calibration: bool
    source: str
    notes: str
    folder: str = ""           # the table's folder: relative config paths are read there

    @property
    def model_ref(self) -> str:
        """What the ``model`` cell reads: a relative path beside the table resolved there
        (:func:`beside`), else the cell as written."""
        return beside(self.folder, self.model)

    @property
    def hardware_ref(self) -> str:
        """What the ``hardware`` cell reads (as :attr:`model_ref`)."""
        return beside(self.folder, self.hardware)

    @property
    def kind(self) -> str:
        """Metric kind: throughput, ttft, tpot or collective."""
        return METRIC_KIND[self.metric]


def _int(row: dict[str, str], key: str, default: int | None, where: str,
         minimum: int = 0) -> int | None:
    text = (row.get(key) or "").strip()
    if not text:
        return default
    try:
        value = int(float(text))
    except (ValueError, OverflowError):
        raise ConfigError(f"{where}: column '{key}' must be an integer, got {text!r}") from None
    if value < minimum or value != float(text):
        raise ConfigError(f"{where}: column '{key}' must be an integer >= {minimum}, "
                          f"got {text!r}")
    return value


def _finite(text: str) -> float | None:
    """``text`` as a finite float, or None when it is not one."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def load_table(path: str | Path | None = None) -> list[Measurement]:
    """Read a measurement table (CSV with the :data:`COLUMNS` header).

    Args:
        path: CSV file (UTF-8, a leading byte-order mark allowed); default the shipped
            ``data/measurements.csv``.

    Returns:
        The rows in file order, each with the table's folder, where a ``model`` or
        ``hardware`` cell that is a relative path is read (:attr:`Measurement.model_ref`).

    Raises:
        ConfigError: unreadable file, missing columns, or a bad value (names row and column).
    """
    p = Path(path) if path is not None else default_table_path()
    try:
        text = p.read_text(encoding="utf-8-sig")     # a spreadsheet's BOM is not a column
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read measurement table: {exc}") from None
    reader = csv.DictReader(text.splitlines())
    header = reader.fieldnames or []
    missing = [c for c in _REQUIRED if c not in header]
    if missing:
        raise ConfigError(f"{p}: missing column(s) {', '.join(missing)}; found "
                          f"{', '.join(map(repr, header)) or 'no header'}; the header must "
                          f"hold {', '.join(_REQUIRED)} among {', '.join(COLUMNS)} "
                          f"(data/README.md)")
    unknown = [c for c in header if c not in COLUMNS]
    if unknown:
        raise ConfigError(f"{p}: unknown column(s) {', '.join(unknown)}; allowed: "
                          f"{', '.join(COLUMNS)}")
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise ConfigError(f"{p}: column{'s' if len(twice) > 1 else ''} {', '.join(twice)} "
                          f"appear{'' if len(twice) > 1 else 's'} more than once in the "
                          f"header; each column once")
    rows: list[Measurement] = []
    seen: set[str] = set()
    for row in reader:
        # the file's line where the row ends (blank lines and quoted line breaks counted)
        where = f"{p} line {reader.line_num}"
        if None in row or None in row.values():
            # DictReader: missing fields read None, extra ones are listed under None
            got = sum(v is not None for k, v in row.items() if k is not None) \
                + len(row.get(None) or ())
            raise ConfigError(f"{where}: {got} fields where the header has {len(header)}; "
                              f"every row has one field per column (empty ones as ,,)")
        rid = (row.get("id") or "").strip()
        if not rid:
            raise ConfigError(f"{where}: empty 'id'")
        if rid in seen:
            raise ConfigError(f"{where}: id {rid!r} appears twice")
        seen.add(rid)
        metric = (row.get("metric") or "").strip()
        if metric not in METRIC_KIND:
            raise ConfigError(f"{where}: metric {metric!r} is not one of "
                              f"{', '.join(METRIC_KIND)}")
        try:
            value = float(row["value"])
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: column 'value' must be a number") from None
        if not (value > 0 and math.isfinite(value)):
            raise ConfigError(f"{where}: column 'value' must be positive and finite")
        batch_text = (row.get("batch") or "").strip().lower()
        batch = None if batch_text == "max" else _int(row, "batch", 1, where, 1)
        tp = _int(row, "tp", 1, where, 1) or 1
        pp = _int(row, "pp", 1, where, 1) or 1
        ep = _int(row, "ep", 1, where, 1) or 1
        dp = _int(row, "dp", 1, where, 1) or 1
        devices = _int(row, "devices", tp * pp * dp, where, 1) or 1
        if devices < tp * pp * dp:
            raise ConfigError(f"{where}: column 'devices' = {devices} is fewer than tp × pp × "
                              f"dp = {tp * pp * dp}")
        coll = (row.get("collective") or "").strip()
        if coll and coll not in COLLECTIVES:
            raise ConfigError(f"{where}: collective {coll!r} is not one of "
                              f"{', '.join(COLLECTIVES)}")
        mb = (row.get("message_bytes") or "").strip()
        message_bytes = _finite(mb) if mb else 0.0
        if metric in ("collective_s", "link_bytes_per_s") and devices < 2:
            raise ConfigError(f"{where}: a {metric} row needs a group of 2 or more devices "
                              f"(column 'devices' or tp × pp × dp): over one rank no "
                              f"collective runs and no link carries bytes")
        if metric == "collective_s":
            if not coll:
                raise ConfigError(f"{where}: a collective_s row needs column 'collective' "
                                  f"({', '.join(COLLECTIVES)})")
            if not (message_bytes and message_bytes > 0):
                raise ConfigError(f"{where}: a collective_s row needs a positive "
                                  f"'message_bytes', got {mb!r}")
        elif message_bytes is None or message_bytes < 0:
            raise ConfigError(f"{where}: column 'message_bytes' must be a non-negative "
                              f"number, got {mb!r}")
        for col in ("model", "hardware"):
            if not (row.get(col) or "").strip():
                raise ConfigError(f"{where}: empty '{col}' (a model name or config path, a "
                                  f"device preset or device file: data/README.md)")
        for col in ("weight_dtype", "kv_dtype"):
            text = (row.get(col) or "").strip()
            if text and text.lower() not in PRECISIONS:
                raise ConfigError(f"{where}: column '{col}' {text!r} is not one of "
                                  f"{', '.join(PRECISIONS)} (or empty)")
        said = (row.get("calibration") or "").strip()
        flag = said.lower()
        if flag not in CALIBRATION_FLAGS:
            raise ConfigError(f"{where}: column 'calibration' {said!r} is not 1 or 0 (or "
                              f"true/false, yes/no, empty for 0)")
        said = (row.get("engine") or "").strip()
        engine = said.lower()          # profile names are lower case; any case names them
        near = difflib.get_close_matches(engine, ENGINE_PROFILES, n=1, cutoff=0.8)
        if engine and engine not in ENGINE_PROFILES and near:
            raise ConfigError(f"{where}: column 'engine' {said!r} names no engine profile; "
                              f"did you mean {near[0]}? (profiles: "
                              f"{', '.join(ENGINE_PROFILES)}; a name far from all of them, "
                              f"e.g. deepep-ll, is priced with the defaults)")
        rows.append(Measurement(
            id=rid, engine=engine, model=row["model"].strip(),
            hardware=row["hardware"].strip(),
            devices=devices,
            weight_dtype=(row.get("weight_dtype") or "bf16").strip().lower(),
            kv_dtype=(row.get("kv_dtype") or "").strip().lower(),
            tp=tp, pp=pp, ep=ep, dp=dp, batch=batch,
            max_batch=_int(row, "max_batch", None, where),
            max_num_tokens=_int(row, "max_num_tokens", None, where) or None,
            isl=_int(row, "isl", 0, where) or 0, osl=_int(row, "osl", 0, where) or 0,
            metric=metric, value=value, collective=coll,
            message_bytes=message_bytes,
            sweep=(row.get("sweep") or "").strip(),
            calibration=flag in ("1", "true", "yes"),
            source=(row.get("source") or "").strip(), notes=(row.get("notes") or "").strip(),
            folder=str(p.parent)))
    if not rows:
        raise ConfigError(f"{p}: no measurement rows under the header")
    return rows


def looks_like_path(cell: str) -> bool:
    """Whether a ``model`` or ``hardware`` cell is a file path rather than a name: it ends
    in ``.json`` or holds a path separator (``/`` or ``\\``)."""
    return cell.endswith(".json") or "/" in cell or "\\" in cell


def beside(folder: str, name: str) -> str:
    """A ``model`` or ``hardware`` cell that names a file or folder in ``folder`` (the
    table's; ``""``: none) -> that path, so a table and its configs travel together: a
    relative path (it holds ``/`` or ``\\`` or ends in ``.json``) that exists there, or a
    bare name of a folder there that holds a ``config.json`` (a model folder, which shadows
    a shipped model of that name as a local folder does for ``--model``). Anything else is
    unchanged: a shipped name, an absolute path, or a relative one that exists only from the
    working directory."""
    if not folder or not name or Path(name).is_absolute():
        return name
    there = Path(folder) / name
    try:
        beside = there.exists() if looks_like_path(name) \
            else (there / "config.json").is_file()
    except (OSError, ValueError):        # a name too long or with a NUL byte for a path
        return name
    if not beside:
        return name
    # a trailing separator says a folder was meant (Path drops it)
    return str(there) + (os.sep if name.endswith(("/", "\\")) else "")



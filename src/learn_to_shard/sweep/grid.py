"""The sweep grid: a YAML file validated by a pydantic schema, expanded into cells.

A grid names models × clusters × workloads × engines × searchers × budgets × seeds; every
combination is one :class:`Cell` (one search). The shipped example is
``examples/sweep-small.yaml``; the fields are documented on :class:`SweepGrid` and the classes
it holds. Every cell has a :meth:`Cell.key`, a stable hash of its inputs, used to skip cells
whose rows are already in the results (resume).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from ..api import (
    DEFAULT_BUDGET,
    MAX_BUDGET,
    checkpoint_dtypes,
    cost_config,
    make_workload,
    with_images,
)
from ..errors import ConfigError, PlannerError
from ..hardware.presets import parse_cluster
from ..model.hf_config import load_model
from ..model.spec import ModelSpec
from ..units import parse_duration_s, to_ms
from ..workload import Workload


def _lower_names(*keys: str) -> Any:
    """A before-validator matching ``keys``' string values case-insensitively (``phase:
    SERVE``, ``dtype: BF16``, ``name: VLLM``), as ``l2s plan`` does."""
    def lower(data: object) -> object:
        if not isinstance(data, dict):
            return data
        return {k: v.lower() if k in keys and isinstance(v, str) else v
                for k, v in data.items()}
    return model_validator(mode="before")(lower)


def _durations(data: object) -> object:
    """``ttft_slo: 2s`` / ``tpot_slo: 50ms`` (a unit is required) → ``ttft_slo_s`` /
    ``tpot_slo_s`` in seconds."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    for key in ("ttft_slo", "tpot_slo"):
        if key not in data:
            continue
        if key + "_s" in data:
            raise ValueError(f"{key} and {key}_s both given; keep one")
        value = data.pop(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"{key}: expected a duration such as 50ms or 2s, got {value!r}")
        try:
            data[key + "_s"] = parse_duration_s(str(value), field=key)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
    return data


#: A count written as an integer (not ``true`` or ``"512"``, which YAML would otherwise let
#: through as 1 and 512).
Count = Annotated[int, Field(gt=0, strict=True)]


def _not_a_boolean(value: Any) -> Any:
    """``value`` unless it is a YAML/JSON boolean, which pydantic's lax float would read as
    1.0 or 0.0, or a string with a digit separator (``"1_0"``, which Python's float() reads
    as 10).

    Raises:
        ValueError: ``true`` or ``false``, or such a string."""
    if isinstance(value, bool):
        raise ValueError("a number is required, not true/false")
    if isinstance(value, str) and "_" in value:
        raise ValueError(f"{value!r} is not a number (no digit separators)")
    return value


#: A positive finite number (``.inf`` and ``.nan`` refused: rates, SLOs, prices). Not strict:
#: PyYAML reads ``1.0e12`` (an exponent without a sign) as a string, which this parses; a
#: boolean is refused (``rate_rps: true`` is not 1 request/s).
Positive = Annotated[float, BeforeValidator(_not_a_boolean), Field(gt=0, allow_inf_nan=False)]


class _Strict(BaseModel):
    """Unknown keys are errors (a typo must not silently drop a setting)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class WorkloadSpec(_Strict):
    """One traffic shape: the workload options of ``l2s plan`` (see
    :func:`learn_to_shard.api.make_workload`).

    Attributes:
        name: label in tables and plots (default: ``phase-isl/osl`` or ``decode-CONTEXT``);
            not part of the cell key.
        phase: ``serve`` (default), ``prefill`` or ``decode``.
        isl, osl: prompt and output tokens (serve: both; prefill: ``isl``).
        context: decode context length, tokens (decode only).
        ttft_slo_s, tpot_slo_s: latency limits, seconds; in the grid file preferably written
            ``ttft_slo: 2s`` and ``tpot_slo: 50ms`` (a unit is required there).
        dtype, kv_dtype: ``bf16`` or ``fp8`` weights and KV cache; default weights: the
            checkpoint's (``fp8`` for FP8 checkpoints), KV as the cell's engine loads the
            checkpoint (``bf16``, or ``fp8`` where it takes the checkpoint's FP8 KV scales;
            :func:`~learn_to_shard.api.checkpoint_dtypes`, as ``l2s plan``).
        rate_rps: offered load, requests/s. Recorded in every row and used by the fleet
            sizing (:mod:`learn_to_shard.sweep.sizing`): how many devices serve it. The search
            itself is not changed by it.
        concurrency: closed-loop clients across the cluster (serve): as ``l2s plan
            --concurrency``, a batch above what one replica receives is refused
            (:attr:`~learn_to_shard.workload.Workload.concurrency`).
        images_per_request, image_tokens: vision-language models (prefill/serve): images per
            prompt and, where the image size sets them, prompt tokens per image, as ``l2s
            plan --images-per-request / --image-tokens``
            (:func:`~learn_to_shard.api.with_images`: each image's tokens join the prompt;
            a cell of a text-only model is an error row naming the field).
    """

    name: str | None = None
    phase: Literal["serve", "prefill", "decode"] = "serve"
    isl: Count | None = None
    osl: Count | None = None
    context: Count | None = None
    ttft_slo_s: Positive | None = None
    tpot_slo_s: Positive | None = None
    dtype: Literal["bf16", "fp8"] | None = None
    kv_dtype: Literal["bf16", "fp8"] | None = None
    rate_rps: Positive | None = None
    concurrency: Count | None = None
    images_per_request: Annotated[int, Field(ge=0, strict=True)] | None = None
    image_tokens: Count | None = None

    _read_durations = model_validator(mode="before")(_durations)
    _lower = _lower_names("phase", "dtype", "kv_dtype")

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadSpec:
        """The same checks as ``l2s plan`` (phase vs isl/osl/context/SLOs)."""
        if self.phase == "decode" and self.isl is not None and self.context is None:
            # as l2s plan refuses --isl with --phase decode (the API reads it as the context)
            raise ValueError("isl: a prompt length (prefill/serve); phase decode takes "
                             "context: give context N, or phase serve with isl and osl")
        try:
            self.workload()
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        if self.rate_rps is not None and self.concurrency is not None:
            raise ValueError("rate_rps and concurrency: give one load, an open loop of "
                             "rate_rps requests/s or a closed loop of concurrency clients "
                             "(l2s plan refuses both too)")
        if self.rate_rps is not None and self.phase == "decode":
            raise ValueError("rate_rps: phase decode has no request rate (steady decoding at "
                             "a fixed context); use phase serve with isl/osl")
        if self.image_tokens is not None and not self.images_per_request:
            raise ValueError("image_tokens: give images_per_request too (tokens per image mean "
                             "nothing without images)")
        if self.images_per_request is not None and self.phase == "decode":
            raise ValueError("images_per_request: images join a prompt: phase prefill or "
                             "serve, not decode")
        return self

    def workload(self, model: ModelSpec | None = None, engine: str | None = None) -> Workload:
        """The :class:`Workload` this spec describes for ``model`` served by ``engine``
        (the checkpoint and engine set the default dtypes as for ``l2s plan``,
        :func:`~learn_to_shard.api.checkpoint_dtypes`; without a model, ``bf16``).

        Raises:
            ConfigError: contradictory fields (as ``l2s plan`` refuses them), or images the
                model cannot take (:func:`~learn_to_shard.api.with_images`; only with
                ``model``, whose images' tokens then join ``isl``).
        """
        dtype, kv_dtype = checkpoint_dtypes(model, self.dtype, self.kv_dtype, engine) \
            if model is not None else (self.dtype or "bf16", self.kv_dtype or "bf16")
        wl = make_workload(self.phase, isl=self.isl, osl=self.osl, context=self.context,
                           dtype=dtype, kv_dtype=kv_dtype,
                           ttft_slo_s=self.ttft_slo_s, tpot_slo_s=self.tpot_slo_s,
                           concurrency=self.concurrency)
        if model is None:
            return wl
        try:
            return with_images(wl, model, self.images_per_request, self.image_tokens)
        except ConfigError as exc:          # the grid's field, not the plan's flag
            raise ConfigError(str(exc).replace("--images-per-request", "images_per_request")
                              .replace("--image-tokens", "image_tokens")) from None

    @property
    def label(self) -> str:
        """``name``, or the shape and whatever else is set: ``serve-1024/256``,
        ``prefill-8192``, ``decode-16384``, ``serve-1024/256 ttft=1s tpot=30ms fp8 rate=20``
        (two workloads that differ only in SLOs, dtypes or load get two labels, which the
        summary tables group by)."""
        if self.name:
            return self.name
        if self.phase == "decode":
            head = f"decode-{self.context}"
        else:
            head = f"{self.phase}-{self.isl}" + (f"/{self.osl}" if self.osl else "")
        extra = [f"{what}={v:g}s" if v >= 1 else f"{what}={to_ms(v):g}ms"
                 for what, v in (("ttft", self.ttft_slo_s), ("tpot", self.tpot_slo_s)) if v]
        extra += [self.dtype] if self.dtype else []
        extra += [f"kv={self.kv_dtype}"] if self.kv_dtype else []
        extra += [f"rate={self.rate_rps:g}"] if self.rate_rps else []
        extra += [f"conc={self.concurrency}"] if self.concurrency else []
        extra += [f"img={self.images_per_request}"] if self.images_per_request else []
        extra += [f"tok/img={self.image_tokens}"] if self.image_tokens else []
        return " ".join([head, *extra])


class EngineSpec(_Strict):
    """The serving engine whose memory policy the cost model assumes (``--engine`` and its two
    flags in ``l2s plan``).

    Attributes:
        name: an engine profile (``vllm``, ``trtllm``, …) or ``None`` for the defaults.
        gpu_memory_utilization: fraction of device memory the engine may use, (0, 1].
        max_num_batched_tokens: tokens per engine step (serve phase).
    """

    _lower = _lower_names("name")
    name: str | None = None
    gpu_memory_utilization: Annotated[float, BeforeValidator(_not_a_boolean),
                                      Field(gt=0, le=1, allow_inf_nan=False)] | None = None
    max_num_batched_tokens: Count | None = None

    @model_validator(mode="after")
    def _known(self) -> EngineSpec:
        try:
            cost_config(self.name, self.gpu_memory_utilization, self.max_num_batched_tokens)
        except ConfigError as exc:
            raise ValueError(str(exc).removeprefix("--engine: ")) from None
        return self

    @property
    def label(self) -> str:
        """``default``, ``vllm``, ``trtllm(mem=0.8,tok=4096)``…"""
        extra = [f"mem={self.gpu_memory_utilization:g}"] if self.gpu_memory_utilization else []
        extra += [f"tok={self.max_num_batched_tokens}"] if self.max_num_batched_tokens else []
        return (self.name or "default") + (f"({','.join(extra)})" if extra else "")


def _engine_entry(value: object) -> object:
    """``- vllm`` and ``- null``/``- default`` are short for ``{name: vllm}`` / ``{}``."""
    if value is None or (isinstance(value, str) and value.lower() == "default"):
        return {}
    if isinstance(value, str):
        return {"name": value}
    return value


class DeviceCounts(_Strict):
    """``{device: h200, counts: [8, 16]}``: one cluster per count of a device preset."""

    device: str
    counts: list[Count] = Field(min_length=1)


ClusterEntry = Annotated[str | DeviceCounts, Field(union_mode="left_to_right")]


class SweepGrid(_Strict):
    """A sweep: every combination of the lists below is one cell.

    Attributes:
        models: shipped model names or ``config.json`` paths (relative to the grid file).
        clusters: ``DEVICE:COUNT`` strings, cluster JSON paths (relative to the grid file), or
            ``{device: KIND, counts: [N, …]}`` entries.
        workloads: traffic shapes (:class:`WorkloadSpec`).
        engines: engine profiles (:class:`EngineSpec`; a bare name or ``default`` is allowed);
            default: the cost model's defaults.
        searchers: searcher names (``l2s plan --method``); default ``[auto]``.
        budgets: evaluation budgets; default ``[4000]``.
        seeds: seeds; default ``[0]``. Seed-independent searchers (``megatron``,
            ``megatron-rule``, ``exact``) run with the first seed only.
        prices_per_device_hour: device kind (a preset or its alias, ``l2s devices``) → price
            of one device for one hour (any currency, e.g. USD); used to rank clusters and
            fleets by cost. Kinds without a price are ranked by device count only.
    """

    models: list[str] = Field(min_length=1)
    clusters: list[ClusterEntry] = Field(min_length=1)
    workloads: list[WorkloadSpec] = Field(min_length=1)
    engines: list[Annotated[EngineSpec, BeforeValidator(_engine_entry)]] = Field(
        default_factory=lambda: [EngineSpec()], min_length=1)
    searchers: list[str] = Field(default_factory=lambda: ["auto"], min_length=1)
    budgets: list[Annotated[int, Field(gt=0, le=MAX_BUDGET, strict=True)]] = Field(
        default_factory=lambda: [DEFAULT_BUDGET], min_length=1)
    seeds: list[Annotated[int, Field(ge=0, strict=True)]] = Field(
        default_factory=lambda: [0], min_length=1)
    prices_per_device_hour: dict[str, Positive] = Field(default_factory=dict)

    @field_validator("prices_per_device_hour")
    @classmethod
    def _price_kinds(cls, prices: dict[str, float]) -> dict[str, float]:
        """Each kind a device preset (an alias as its preset's name, e.g. ``h100`` →
        ``h100-sxm``, which the rows carry), none priced twice."""
        from .sizing import price_table

        try:
            return price_table(prices.items())
        except PlannerError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("workloads")
    @classmethod
    def _distinct_workloads(cls, workloads: list[WorkloadSpec]) -> list[WorkloadSpec]:
        """Each workload its own label: the summary tables group rows by it, so two
        workloads under one name (the same ``name``, or unnamed and alike but for a field
        the default label leaves out) would be merged; and its own settings: the cells of
        two workloads alike but for their ``name`` are one cell (the name is not part of
        :meth:`Cell.key`), so the second name would never appear."""
        seen: dict[str, int] = {}
        same: dict[str, int] = {}
        for i, wl in enumerate(workloads):
            settings = wl.model_dump_json(exclude={"name"})
            if settings in same:
                raise ValueError(f"workloads[{i}] ({wl.label!r}) has the settings of "
                                 f"workloads[{same[settings]}] "
                                 f"({workloads[same[settings]].label!r})"
                                 + (" under another name" if wl.label != workloads[
                                     same[settings]].label else "")
                                 + ": they are one cell; remove one")
            same[settings] = i
            if wl.label in seen:
                raise ValueError(f"workloads[{i}] is labelled {wl.label!r} like "
                                 f"workloads[{seen[wl.label]}]; give each a distinct name")
            seen[wl.label] = i
        return workloads

    @model_validator(mode="after")
    def _step_budget_for_serve_only(self) -> SweepGrid:
        """An engine's ``max_num_batched_tokens`` with a workload outside the serve phase is
        refused, as ``l2s plan --max-num-batched-tokens`` refuses it there (a prefill plan
        runs its prompts in one pass, which its export sets the budget to; a decode plan
        reserves the default budget's workspace): a sweep row would otherwise price a setting
        ``plan`` cannot reproduce."""
        for i, eng in enumerate(self.engines):
            if eng.max_num_batched_tokens is None:
                continue
            for j, wl in enumerate(self.workloads):
                if wl.phase != "serve":
                    raise ValueError(f"engines[{i}].max_num_batched_tokens: applies to serve "
                                     f"workloads only, and workloads[{j}] is {wl.phase} (no "
                                     f"mixed prefill/decode step); give the budget in a grid "
                                     f"of serve workloads")
        return self

    @model_validator(mode="after")
    def _images_fit_the_models(self) -> SweepGrid:
        """A workload with images, under each model that loads here (a config path is
        checked when its cell runs): the images the model can take, as ``l2s plan`` checks
        its image flags before any work. A request beyond a model's positions is not refused
        here: its cells are infeasible rows that say why (``cells.run_cell``), the grid's
        other pairs run."""
        for i, wl in enumerate(self.workloads):
            if not wl.images_per_request and wl.image_tokens is None:
                continue
            for j, name in enumerate(self.models):
                try:
                    spec = load_model(name)
                except PlannerError:
                    continue
                try:
                    wl.workload(spec)
                except ConfigError as exc:
                    raise ValueError(f"workloads[{i}] under models[{j}] ({name}): {exc}") \
                        from None
        return self

    @field_validator("searchers")
    @classmethod
    def _searchers(cls, names: list[str]) -> list[str]:
        from ..search import searcher_names

        valid = ["auto", *searcher_names()]
        bad = [n for n in names if n not in valid]
        if bad:
            raise ValueError(f"{', '.join(map(repr, bad))} not among {', '.join(valid)}")
        return names

    def cluster_names(self) -> list[str]:
        """Every cluster of the grid as a ``DEVICE:COUNT`` string (the preset's own name and
        the count as a number, so ``h100:2``, ``H100:02`` and ``h100-sxm:2`` are one cluster)
        or a file path, in order, each once."""
        from ..hardware.presets import load_device

        def canonical(device: str) -> str:
            try:
                return load_device(device).name
            except PlannerError:
                return device                 # not a preset: the cell reports it

        out: list[str] = []
        for entry in self.clusters:
            if isinstance(entry, DeviceCounts):
                out.extend(f"{canonical(entry.device)}:{n}" for n in entry.counts)
            elif not entry.endswith(".json") and entry.count(":") == 1:
                device, count = entry.split(":")
                count = count.strip()
                number = count.isascii() and count.isdigit()
                out.append(f"{canonical(device)}:{int(count) if number else count}")
            else:
                out.append(entry)
        return list(dict.fromkeys(out))


class Cell(_Strict):
    """One search of the sweep: a model, a cluster, a workload, an engine, a searcher, a
    budget and a seed (picklable; sent to worker processes and Ray tasks)."""

    model: str
    cluster: str
    workload: WorkloadSpec
    engine: EngineSpec
    searcher: str
    budget: PositiveInt
    seed: NonNegativeInt
    #: :func:`inputs_digest` of ``model`` and ``cluster`` where either is read from a file (a
    #: config.json, a model folder or HF cache entry, a cluster JSON file): editing the file
    #: changes the cell's key, so a resumed sweep runs it again. ``None`` for shipped model
    #: names and ``DEVICE:COUNT`` clusters.
    inputs: str | None = None

    def key(self) -> str:
        """A stable hash of the cell's inputs: the first 16 hex digits of the SHA-256 of their
        canonical JSON (sorted keys; the workload's display ``name`` left out, and its image
        fields and ``inputs`` where unset, so a cell keeps the key it had before they
        existed). Equal inputs give equal keys on every machine and Python version."""
        data = self.model_dump(mode="json")
        if data.get("inputs") is None:
            data.pop("inputs", None)
        data["workload"].pop("name", None)
        for key in ("images_per_request", "image_tokens"):     # unset: the keys of before
            if not data["workload"].get(key):                  # (0 images: none)
                data["workload"].pop(key, None)
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _seed_independent(searcher: str) -> bool:
    from ..report.compare import is_seed_independent

    return searcher == "exact" or (searcher != "auto" and is_seed_independent(searcher))


def _digest(value: Any) -> str:
    """SHA-256 prefix of a spec's fields, less those derived from where it was read
    (``source``, an absolute path, and ``name``, from the file's or folder's name: they
    differ between machines and HF caches for the same bytes; the cell's key holds the
    model and cluster as written)."""
    fields = dataclasses.asdict(value)
    fields.pop("source", None)
    fields.pop("name", None)
    text = json.dumps(fields, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _model_digest(model: str) -> str | None:
    try:
        spec = load_model(model)
    except PlannerError:
        return None             # the cell fails when it runs and says why
    return None if spec.source_kind == "shipped" else _digest(spec)


def _cluster_digest(cluster: str) -> str | None:
    path = Path(cluster.strip())
    if not (path.suffix.lower() == ".json" or path.is_file()):
        return None
    try:
        return _digest(parse_cluster(cluster))
    except PlannerError:
        return None


def inputs_digest(model_digest: str | None, cluster_digest: str | None) -> str | None:
    """What a cell reads from files, as one hash (SHA-256 prefix, 16 hex digits) of the hash
    of the parsed model (every field of its :class:`~learn_to_shard.model.spec.ModelSpec`)
    where the model is not a shipped name and of the parsed cluster (its
    :class:`~learn_to_shard.hardware.spec.ClusterSpec`, device fields included) where the
    cluster is a JSON file; ``None`` where neither is, and for a file that does not parse
    (the cell fails when it runs and says why)."""
    parts = {k: v for k, v in (("model", model_digest), ("cluster", cluster_digest)) if v}
    if not parts:
        return None
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def expand(grid: SweepGrid) -> list[Cell]:
    """Every cell of ``grid``, models outermost and seeds innermost, duplicates dropped; each
    with the :func:`inputs_digest` of its model and cluster files.

    Seed-independent searchers (:func:`learn_to_shard.report.compare.is_seed_independent`,
    and ``exact``) get one cell, with the first seed.
    """
    cells: list[Cell] = []
    seen: set[str] = set()
    clusters = {c: _cluster_digest(c) for c in grid.cluster_names()}
    for model in grid.models:
        model_digest = _model_digest(model)
        for cluster in clusters:
            digest = inputs_digest(model_digest, clusters[cluster])
            for wl in grid.workloads:
                for engine in grid.engines:
                    for searcher in grid.searchers:
                        seeds = grid.seeds[:1] if _seed_independent(searcher) else grid.seeds
                        for budget in grid.budgets:
                            for seed in seeds:
                                cell = Cell(model=model, cluster=cluster, workload=wl,
                                            engine=engine, searcher=searcher, budget=budget,
                                            seed=seed, inputs=digest)
                                if cell.key() not in seen:
                                    seen.add(cell.key())
                                    cells.append(cell)
    return cells


def _loc(loc: tuple[int | str, ...]) -> str:
    """pydantic's error location → ``workloads[0].isl``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("str", "DeviceCounts", "function-before[_engine_entry(), EngineSpec]"):
            continue                           # union branch names, not fields
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def validation_message(exc: ValidationError, where: str) -> str:
    """A pydantic error as one line: ``GRID.yaml: workloads[0].isl: Input should be …``
    (the most specific error — the deepest location, so a union names the branch that almost
    matched — then up to two other errors and how many more there are; a union's branches not
    taken are left out)."""
    errors = exc.errors()
    first = max(errors, key=lambda e: len(e["loc"]))
    msg = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        # Name the keys that would be valid where the unknown one stands.
        parent = tuple(first["loc"][:-1])
        models: dict[str, type[BaseModel]] = {"workloads": WorkloadSpec,
                                              "engines": EngineSpec,
                                              "clusters": DeviceCounts}
        model = models.get(str(parent[0]) if parent else "", SweepGrid)
        keys = [k for k in model.model_fields if not k.endswith("_slo_s")]
        if model is WorkloadSpec:
            keys += ["ttft_slo", "tpot_slo"]
        msg = f"not a valid key here; valid: {', '.join(keys)}"
    # The other errors, one per place (a union's branches that all fail at one place are one
    # error), leaving out the places at or above the most specific error: there they are
    # the union's alternatives it did not take, not errors of their own.
    at = _loc(tuple(first["loc"]))
    seen = {at}
    deeper = []
    for e in errors:
        where_e = _loc(tuple(e["loc"]))
        if where_e not in seen and not at.startswith((where_e + ".", where_e + "[")):
            seen.add(where_e)
            deeper.append(e)
    more = ""
    if deeper:
        shown = "; ".join(f"{_loc(tuple(e['loc']))}: "
                          f"{str(e['msg']).removeprefix('Value error, ')}" for e in deeper[:2])
        more = f" (also {shown}" + (f"; and {len(deeper) - 2} more" if len(deeper) > 2
                                    else "") + ")"
    return f"{where}: {at}: {msg}{more}"


def _resolve(text: str, base: Path) -> str:
    """A model or cluster given as a relative path that exists next to the grid file becomes an
    absolute path (so worker processes and Ray nodes find it); anything else is unchanged."""
    p = base / text
    if not Path(text).is_absolute() and p.exists():
        return str(p.resolve())
    return text


def grid_from_data(data: Any, where: str = "grid", base: Path | None = None) -> SweepGrid:
    """Validate a grid given as plain data (the parsed YAML) and check that every model and
    cluster loads.

    Args:
        data: the mapping read from the YAML file.
        where: the file name used in error messages.
        base: folder relative model/cluster paths are resolved against (default: the
            current directory).

    Raises:
        ConfigError: one line naming the field and what would be valid.
    """
    from ..hardware.presets import parse_cluster
    from ..model.hf_config import load_model

    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with models, clusters, workloads, …; "
                          f"got {type(data).__name__}")
    try:
        grid = SweepGrid.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(validation_message(exc, where)) from None
    base = base or Path.cwd()
    models = [_resolve(m, base) for m in grid.models]
    clusters = [c if isinstance(c, DeviceCounts) else _resolve(c, base) for c in grid.clusters]
    grid = grid.model_copy(update={"models": models, "clusters": clusters})
    for i, m in enumerate(grid.models):
        try:
            load_model(m)
        except PlannerError as exc:
            raise ConfigError(f"{where}: models[{i}]: {exc}") from None
    for c in grid.cluster_names():
        try:
            parse_cluster(c)
        except PlannerError as exc:
            raise ConfigError(f"{where}: clusters: {exc}") from None
    return grid


def load_grid(path: Path) -> SweepGrid:
    """Read and validate a grid YAML file (see :class:`SweepGrid`).

    Raises:
        ConfigError: the file is missing, not UTF-8 or not YAML, repeats a key in a mapping,
            or a field is invalid (one line naming the file and the field).
    """
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read grid file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at "
                          f"offset {exc.start}); save the grid file as UTF-8") from None
    class _UniqueKeys(yaml.SafeLoader):
        """PyYAML's safe loader, refusing a mapping that repeats a key (plain YAML keeps the
        last, so a second ``models:`` would replace the first without a word)."""

        def construct_mapping(self, node: yaml.MappingNode,
                              deep: bool = False) -> dict[object, object]:
            seen: set[object] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    hash(key)
                except TypeError:            # PyYAML's own check says "unhashable key"
                    break
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} given twice in one mapping",
                        key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    try:
        data = yaml.load(text, Loader=_UniqueKeys)      # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{at}: "
                          f"{getattr(exc, 'problem', None) or exc}") from None
    return grid_from_data(data, str(path), Path(path).resolve().parent)


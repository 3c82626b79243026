"""Exact search: the true optimum of the strategy space under the cost model, with a certificate.

For fixed degrees and batch the per-operator choices form a chain of layouts (DESIGN §2, §4):
each operator's time depends on its own choice and the layout it receives, each layout change on
its two neighbours. :mod:`learn_to_shard.search.exact_tables` turns the cost model into per-operator
tables by evaluating the model's own per-layer code; this module solves the problem exactly.

Algorithm (every pruning step is admissible, so the result is the optimum of
``CostModel.evaluate_many`` over every action vector of the space):

1. **Degrees.** Enumerate every (tp, ep, pp, dp, batch) index combination; drop those that break a
   structural rule whatever the choices (``StrategySpace.rule_bits_many`` with every operator
   replicated, which breaks no choice-dependent rule).
2. **Memory bound.** Per combination, a lower bound on the worst stage's memory: every
   operator's smallest allowed weight share, the attention choice's KV. Drop combinations where
   no attention choice fits.
3. **Per-operator Pareto sets.** Per distinct (tp, ep, dp, tokens) setting and per hub
   (qkv_proj, attention, o_proj) — the operators every layer shares and whose layout closes the
   layer loop — the remaining groups (embedding; dense FFN; router; expert group; LM head) are
   independent. Each group's options are reduced to those not dominated on the feature vector
   ``z`` (per-(layer type, previous type) time, LM time, per-type weights, embedding/LM weights,
   KV), which is exact because stage times, memory, TPOT/TTFT and the objective are monotone in
   ``z``. Options that change a later layout are only compared within the same layout.
4. **Bound and solve.** For each combination an upper bound on its objective comes from the
   component-wise minimum of its candidates' ``z`` (per attention choice). Combinations are
   solved in decreasing bound order — every candidate of its setting evaluated exactly, with
   pipeline stage classes, memory and SLOs — until the bound falls below the best found.
5. **Check.** The decomposition is compared with ``evaluate_many`` on random strategies before
   the search, and the optimum is re-evaluated with ``evaluate_many`` after it; a disagreement
   raises :class:`~learn_to_shard.search.exact_tables.DecompositionError`.

What breaks a pure chain and how each is handled: :data:`~learn_to_shard.search.exact_tables.
CHAIN_BREAKS` (all exactly; nothing is approximated).
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from ..arrays import unique_rows
from ..cost import aggregate
from ..cost.model import CostModel
from ..parallel.mesh import Mesh
from ..parallel.ops import MEGATRON_DIMS, NUM_CHOICES, NUM_OPS, REPLICATED, Op
from ..parallel.space import (
    ACTION_LEN,
    BATCH_HEAD,
    CP_HEAD,
    DP_HEAD,
    ENGINE_LAYOUT_BIT,
    NUM_COARSE,
    StrategySpace,
    batch_grid,
)
from ..parallel.strategy import Strategy
from . import register
from .base import BudgetedEvaluator, ProgressFn, SearchResult
from .exact_tables import (
    CHAIN_BREAKS,
    HUB,
    N_AO,
    N_HUB,
    N_LAYOUTS,
    Coarse,
    DecompositionError,
    Keys,
    MemTables,
    Parts,
    StepTables,
    Structure,
    ZLayout,
    assemble_z,
    build_parts,
    coarse_terms,
    evaluate_z,
    feature_floor,
    kv_free,
    main_step_tables,
    mem_tables,
    needs_step2,
    peak_z,
    step_tables,
    verify,
)

#: Keys per table/candidate chunk (bounds peak memory of the vectorised tables).
KEY_CHUNK_CELLS = 3_000_000
#: Keys per chunk of the feature floors (step 3a): a floor holds ``[K, 27, n]`` arrays for
#: a few feature columns only, so its chunks are larger than :data:`KEY_CHUNK_CELLS` allows.
FLOOR_CHUNK_CELLS = 6_000_000
#: (degree combination, candidate) pairs per vectorised evaluation chunk.
PAIR_CHUNK = 400_000
#: Relative slack when comparing bounds with the incumbent (float rounding only).
_SLACK = 1e-12
#: Work limit (table rows + exact candidate evaluations, :attr:`Certificate.work`) of the exact
#: search run by ``--method auto`` and by ``l2s compare``'s fraction-of-optimum column. Work is
#: counted, not timed, so the choice is a deterministic function of the problem, the same on a
#: loaded machine as on an idle one. On the project's 2-core machines one core does about
#: 0.4-0.6 million units per second (GPT-MoE-1.6T decode at 16k on 24,576 H100s: 3.2 million
#: units, 6-8 s; ``bench/exact_speed.py``), so the limit corresponds to roughly 25-40 s there.
DEFAULT_WORK_LIMIT = 15_000_000


class ExactLimitExceeded(RuntimeError):
    """The exact search stopped at a limit it was given (work or wall clock)."""


class ExactTimeout(ExactLimitExceeded):
    """The exact search exceeded its wall-clock limit (``ExactSearcher(time_limit_s=...)``)."""


class ExactWorkLimit(ExactLimitExceeded):
    """The exact search needed more work than its limit (``ExactSearcher(work_limit=...)``);
    the count is deterministic, so the same problem always stops at the same point."""


@dataclass
class Certificate:
    """What the exact search did, so a reader can check the claim of optimality.

    Attributes:
        degree_combos: (tp, ep, pp, dp, batch) combinations enumerated.
        pruned_structure: combinations that break a structural rule for every choice.
        pruned_memory: combinations whose memory lower bound exceeds usable memory.
        pruned_bound: combinations whose objective upper bound is below the optimum found (or
            whose latency lower bound breaks an SLO).
        solved: combinations solved exactly (every non-dominated candidate evaluated).
        settings: distinct (tp, ep, dp, tokens) settings whose tables were built.
        table_rows: per-operator rows evaluated through the cost model's layer code.
        candidates: non-dominated per-operator candidates over all settings.
        pairs_evaluated: (combination, candidate) pairs evaluated exactly.
        choices_per_combo: per-operator choice vectors each combination stands for (3**12).
        verified: random strategies on which the decomposition matched ``evaluate_many``.
        work: table rows plus candidate pairs evaluated so far — the deterministic measure of
            effort that ``work_limit`` bounds.
        optimum_rel_err: relative difference between the optimum as solved and as
            re-evaluated by ``evaluate_many``.
        any_batch: the optimum is certified over every integer batch ``1 … max(batch
            grid)`` (the space's ``any_batch``), not only the grid.
        batch_cells: (combination, gap to the next grid batch) cells bounded.
        batch_cells_open: cells whose bound reached the grid optimum (then solved integer
            by integer).
        batch_integers_solved: (combination, integer batch) rows of those cells solved.
        wall_s: seconds.
    """

    degree_combos: int = 0
    pruned_structure: int = 0
    pruned_memory: int = 0
    pruned_bound: int = 0
    solved: int = 0
    settings: int = 0
    table_rows: int = 0
    candidates: int = 0
    pairs_evaluated: int = 0
    choices_per_combo: int = NUM_CHOICES ** NUM_OPS
    verified: int = 0
    optimum_rel_err: float = 0.0
    any_batch: bool = False
    batch_cells: int = 0
    batch_cells_open: int = 0
    batch_integers_solved: int = 0
    wall_s: float = 0.0

    @property
    def work(self) -> int:
        """Table rows plus (combination, candidate) pairs evaluated: the work count."""
        return self.table_rows + self.pairs_evaluated

    def notes(self) -> dict[str, object]:
        """Flat ``exact_*`` notes for :class:`~learn_to_shard.search.base.SearchResult`."""
        out: dict[str, object] = {f"exact_{k}": v for k, v in asdict(self).items()}
        out["exact_work"] = self.work
        out["exact_chain_breaks"] = "; ".join(b.split(" ->")[0] for b in CHAIN_BREAKS)
        return out


@dataclass
class ExactSolution:
    """Result of :func:`solve`.

    Attributes:
        best_action: the optimum's action vector (``None`` if nothing is feasible).
        best_objective: its objective as solved (tokens/s per device).
        top: up to ``keep`` best feasible action vectors (distinct degrees), best first.
        rejected: action vectors of the fastest infeasible candidates seen.
        closest: action vectors to explain infeasibility when nothing fits.
        certificate: the counts.
        curve: best feasible objective after each complete strategy evaluated, in order.
        open_cells: with ``cells=True``, the batch gaps whose upper bound reaches the
            optimum: ``(coarse [R, 4] degree indices, lo [R], hi [R])`` — every multiple of dp
            in ``(lo, hi]`` may still beat it; ``None`` otherwise.
    """

    best_action: np.ndarray | None
    best_objective: float
    top: list[np.ndarray]
    rejected: list[np.ndarray]
    closest: list[np.ndarray]
    certificate: Certificate
    curve: np.ndarray = field(default_factory=lambda: np.zeros(0))
    open_cells: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


@dataclass
class SettingCache:
    """What :func:`solve` computed per setting, kept between its calls on one cost model.

    The batch branch and bound of :func:`solve_any_batch` solves a cell's lower end again
    at every split (and a split's middle becomes the lower end of the next round), so most
    of its settings were already tabulated. Entries depend only on the setting (every
    :class:`~learn_to_shard.search.exact_tables.Keys` field, as values) and on the cost
    model, never on the batch grid or on the incumbent, so a cache is valid for every call
    on the same cost model or a copy differing only in its batch candidates.

    Attributes:
        floors: setting -> ``(zlb [3, F], emb_t, emb_t2, ws)``: the feature floor per
            attention choice, the embedding time of the main / TTFT step (seconds; ``nan``
            without a TTFT step) and the workspace bytes.
        cands: setting -> ``(z [C, F], dims [C, 12])``: the non-dominated candidates.
    """

    floors: dict[tuple[float, ...], tuple[np.ndarray, float, float, float]] = field(
        default_factory=dict)
    cands: dict[tuple[float, ...], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


def _setting_ids(keys: Keys) -> list[tuple[float, ...]]:
    """Each setting as a tuple of all its :class:`Keys` fields that are set (the
    :class:`SettingCache` key)."""
    cols = np.stack([np.asarray(getattr(keys, f), dtype=np.float64)
                     for f in Keys.__dataclass_fields__ if getattr(keys, f) is not None],
                    axis=1)
    return [tuple(r) for r in cols.tolist()]


# ---------------------------------------------------------------------------------- Pareto
def pareto_mask(z: np.ndarray, ok: np.ndarray, cls: np.ndarray | None = None) -> np.ndarray:
    """Non-dominated options within each batch row (minimisation of every feature).

    Option ``j`` dominates ``i`` when it is allowed, in the same class, no larger in every
    feature and smaller in one (or equal everywhere and listed first).

    Args:
        z: ``[B, n, F]`` features.
        ok: ``[B, n]`` allowed options.
        cls: optional ``[B, n]`` class labels; options are compared only within a class.

    Returns:
        ``[B, n]`` mask of kept options (allowed and not dominated).
    """
    b, n, f = z.shape
    keep = ok.copy()
    if n <= 1:
        return keep
    live = np.flatnonzero(ok.any(axis=0))
    if len(live) < n:
        # An option allowed in no row neither survives nor dominates: compare the others
        # (in their order, so ties break as before).
        keep[:] = False
        keep[:, live] = pareto_mask(z[:, live], ok[:, live],
                                    None if cls is None else cls[:, live])
        return keep
    if b >= _DEDUP_ROWS and n >= _DEDUP_OPTIONS:
        # Batch rows that are bitwise equal (features, allowed options, classes) have the
        # same mask: compare each distinct row once.
        parts = [z, ok] if cls is None else [z, ok, cls]
        rows = np.concatenate([np.ascontiguousarray(a).reshape(b, -1).view(np.uint8)
                               for a in parts], axis=1)      # each row's bytes, exactly
        _, first, inverse = np.unique(rows.view(np.dtype((np.void, rows.shape[1]))).ravel(),
                                      return_index=True, return_inverse=True)
        if len(first) < b:
            return _pareto_rows(z[first], ok[first],
                                None if cls is None else cls[first])[inverse.ravel()]
    return _pareto_rows(z, ok, cls)


#: :func:`pareto_mask` looks for equal batch rows when there are at least this many rows of
#: at least this many options (below, the comparison is cheaper than the search for them).
_DEDUP_ROWS = 64
_DEDUP_OPTIONS = 16


def _pareto_rows(z: np.ndarray, ok: np.ndarray, cls: np.ndarray | None) -> np.ndarray:
    """:func:`pareto_mask` by comparing every pair of options of every batch row."""
    b, n, f = z.shape
    keep = ok.copy()
    step = max(1, 4_000_000 // (n * n))
    tri = np.tri(n, k=-1, dtype=bool).T          # [j, i]: j < i
    for s in range(0, b, step):
        zz = z[s:s + step]
        le = np.ones((len(zz), n, n), dtype=bool)  # [b, j, i]: z_j <= z_i everywhere
        lt = np.zeros((len(zz), n, n), dtype=bool)  # z_j < z_i somewhere
        for c in range(f):
            col = zz[:, :, c]
            le &= col[:, :, None] <= col[:, None, :]
            lt |= col[:, :, None] < col[:, None, :]
        dom = le & (lt | tri[None]) & ok[s:s + step, :, None]
        if cls is not None:
            cc = cls[s:s + step]
            dom &= cc[:, :, None] == cc[:, None, :]
        keep[s:s + step] &= ~dom.any(axis=1)
    return keep


@dataclass
class _Cands:
    """Candidates of a set of settings, sorted by setting."""

    key: np.ndarray          # [C] global setting index
    z: np.ndarray            # [C, F]
    dims: np.ndarray         # [C, 12]


def _expand(state: dict[str, np.ndarray], mask: np.ndarray, name: str) -> dict[str, np.ndarray]:
    """Cross every partial candidate with the options ``mask[k, h, :]`` allows."""
    sel = mask[state["k"], state["hub"]]
    i, o = np.nonzero(sel)
    out = {kk: v[i] for kk, v in state.items()}
    out[name] = o
    return out


def _candidates(st: Structure, pa: Parts, key_offset: int) -> _Cands:
    """Products of the per-group Pareto sets, per setting and hub (step 3 of the algorithm)."""
    k = pa.hub.shape[0]
    h_ao = np.arange(N_HUB) % N_AO

    def bcast(ok: np.ndarray) -> np.ndarray:
        return np.broadcast_to(ok[:, None, :], (k, N_HUB, ok.shape[1])).reshape(k * N_HUB, -1)

    def prune(part: np.ndarray, ok: np.ndarray, cls: np.ndarray | None = None) -> np.ndarray:
        n = part.shape[2]
        # Features equal across a group's options cannot decide dominance: compare the rest.
        cols = np.flatnonzero((part.max(axis=2) != part.min(axis=2)).any(axis=(0, 1)))
        return pareto_mask(part[..., cols].reshape(k * N_HUB, n, len(cols)), bcast(ok),
                           None if cls is None else cls.reshape(k * N_HUB, n)
                           ).reshape(k, N_HUB, n)

    last_cls = pa.last_out[:, h_ao, :]                      # [K, N_HUB, nφ]
    m_emb = prune(pa.emb, pa.emb_ok)
    m_dense = prune(pa.dense, pa.dense_ok, last_cls if pa.last_dense else None)
    m_router = prune(pa.router, pa.router_ok)
    m_group = prune(pa.group, pa.group_ok, None if pa.last_dense else last_cls)
    m_lm = pareto_mask(pa.lm.reshape(k * N_LAYOUTS, NUM_CHOICES, -1),
                       np.repeat(pa.lm_ok, N_LAYOUTS, axis=0)).reshape(k, N_LAYOUTS, NUM_CHOICES)
    kk, hh = np.nonzero(pa.hub_ok)
    state = {"k": kk, "hub": hh}
    for name, mask in (("emb", m_emb), ("dense", m_dense), ("router", m_router),
                       ("group", m_group)):
        state = _expand(state, mask, name)
    phi = state["dense"] if pa.last_dense else state["group"]
    ell = pa.last_out[state["k"], state["hub"] % N_AO, phi]
    i, o = np.nonzero(m_lm[state["k"], ell])
    state = {kk_: v[i] for kk_, v in state.items()}
    state["lm"] = o
    z = assemble_z(pa, state["k"], state)
    dims = np.full((len(z), NUM_OPS), REPLICATED, dtype=np.int64)
    h = state["hub"]
    dims[:, Op.EMBEDDING] = state["emb"]
    dims[:, [Op.QKV_PROJ, Op.ATTENTION, Op.O_PROJ]] = HUB[h]
    dims[:, Op.DENSE_UP] = st.d_opts[state["dense"], 0]
    dims[:, Op.DENSE_DOWN] = st.d_opts[state["dense"], 1]
    dims[:, Op.ROUTER] = st.r_opts[state["router"]]
    for j, op in enumerate((Op.EXPERT_UP, Op.EXPERT_DOWN, Op.SHARED_EXPERT_UP,
                            Op.SHARED_EXPERT_DOWN)):
        dims[:, op] = st.g_opts[state["group"], j]
    dims[:, Op.LM_HEAD] = state["lm"]
    order = np.argsort(state["k"], kind="stable")
    return _Cands(key=state["k"][order] + key_offset, z=z[order], dims=dims[order])


# ---------------------------------------------------------------------------------- bounds
def _memory_floor(st: Structure, lay: ZLayout, mt, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Memory-only feature vectors ``[K, 3, F]`` (per attention choice: the smallest allowed
    weights of every operator and that choice's KV) and ``[K, 3]`` whether the attention
    choice is allowed at all. Features stay finite (an infinite one times a zero stage count
    would be NaN): disallowed choices are masked by the caller."""
    z = np.zeros((k, NUM_CHOICES, lay.size))
    ok = mt.allowed
    big = np.where(ok, 0.0, np.inf)
    for t, (is_moe, _) in enumerate(st.types):
        ops = [Op.QKV_PROJ, Op.O_PROJ]
        ops += [Op.ROUTER, Op.EXPERT_UP, Op.EXPERT_DOWN] if is_moe else \
            [Op.DENSE_UP, Op.DENSE_DOWN]
        if is_moe and st.has_shared:
            ops += [Op.SHARED_EXPERT_UP, Op.SHARED_EXPERT_DOWN]
        # Replicated is always allowed, so every minimum is finite.
        w = mt.W0[t] + sum((mt.dW[t][:, op] + big[:, op]).min(axis=1) for op in ops)
        z[:, :, lay.w.start + t] = w[:, None]
        z[:, 0, lay.kv_seq.start + t] = mt.KV[t][:, 0]
        z[:, 1:, lay.kv.start + t] = mt.KV[t][:, 1:]
    z[:, :, lay.ew] = (mt.EW + big[:, Op.EMBEDDING]).min(axis=1)[:, None]
    z[:, :, lay.lw] = (mt.LW + big[:, Op.LM_HEAD]).min(axis=1)[:, None]
    return z, ok[:, Op.ATTENTION]


def _by_pp(co: Coarse):
    """Yield (pp index, row indices) groups."""
    for p in np.unique(co.pp_idx):
        yield int(p), np.flatnonzero(co.pp_idx == p)


# ---------------------------------------------------------------------------------- solver
def solve(cm: CostModel, time_limit_s: float | None = None, keep: int = 5,
          verify_samples: int = 64, progress: ProgressFn | None = None,
          work_limit: int | None = None, incumbent: float = 0.0,
          only: np.ndarray | None = None, cells: bool = False,
          tops: np.ndarray | None = None,
          setting_cache: SettingCache | None = None, explain: bool = True) -> ExactSolution:
    """The optimum of ``cm`` over its whole strategy space, with a certificate.

    Args:
        cm: the problem.
        time_limit_s: give up (raise :class:`ExactTimeout`) past this many seconds.
        work_limit: give up (raise :class:`ExactWorkLimit`) once the work count
            (:attr:`Certificate.work`) would exceed this; checked before each chunk of tables
            (from the rows that chunk will build) and after each chunk of candidates, so the
            outcome depends only on the problem.
        keep: how many best distinct-degree strategies to return besides the optimum.
        verify_samples: random strategies on which to check the decomposition first (0: skip).
        progress: optional callback receiving the number of degree combinations finished.
        incumbent: an objective already achieved elsewhere; combinations whose bound is below
            it are not solved.
        only: ``[R, 5]`` coarse index rows; when given, only these combinations are searched.
        cells: also bound every batch between a combination's batch and the next grid batch
            of the same degrees (:func:`_cell_bounds`) and return the gaps that reach the
            optimum as ``open_cells``.
        tops: with ``only`` (distinct rows), each row's cell top instead of the next grid
            batch.
        setting_cache: per-setting floors and candidates from earlier calls on this cost
            model (read and extended; :class:`SettingCache`); ``None``: none kept.
        explain: when nothing is feasible, also return the combinations whose floors come
            nearest the SLOs (:func:`_nearest_slo_rows`) among ``closest``; the refinement
            solves of :func:`solve_any_batch`, whose ``closest`` is not read, skip them.

    Returns:
        An :class:`ExactSolution`.

    Raises:
        ExactTimeout: past ``time_limit_s``.
        ExactWorkLimit: past ``work_limit``.
        DecompositionError: the decomposition disagrees with ``evaluate_many``.
    """
    t0 = time.perf_counter()
    cert = Certificate()

    def check_time(upcoming: int = 0) -> None:
        if time_limit_s is not None and time.perf_counter() - t0 > time_limit_s:
            raise ExactTimeout(f"exact search exceeded {time_limit_s:g} s")
        if work_limit is not None and cert.work + upcoming > work_limit:
            raise ExactWorkLimit(f"exact search needs more than {work_limit:,} units of work "
                                 f"(table rows + candidate evaluations)")

    st = Structure.of(cm)
    if verify_samples:
        cert.verified = verify(cm, n=verify_samples, st=st)
    check_time()
    sp = cm.space
    # 1. Degrees.
    if only is None:
        coarse = coarse_grid(sp)
    elif tops is not None:
        coarse = np.asarray(only, dtype=np.int64).reshape(-1, NUM_COARSE)
    else:
        coarse = unique_rows(np.asarray(only, dtype=np.int64).reshape(-1, NUM_COARSE)).values
    cert.degree_combos = len(coarse)
    full = np.full((len(coarse), ACTION_LEN), REPLICATED, dtype=np.int64)
    full[:, :NUM_COARSE] = coarse
    valid = (sp.rule_bits_many(full) & ~ENGINE_LAYOUT_BIT) == 0     # layouts: step 3
    cert.pruned_structure = int((~valid).sum())
    coarse = coarse[valid]
    if tops is not None:
        cell_hi = np.asarray(tops, dtype=np.int64)[valid]
    else:
        cell_hi = _cell_tops(sp, coarse) if cells else None
    step2 = needs_step2(cm)
    empty = ExactSolution(None, 0.0, [], [], [], cert)
    if not len(coarse):
        cert.wall_s = time.perf_counter() - t0
        return empty
    co, keys = coarse_terms(cm, coarse)
    # 2. Memory bound (memory tables are cheap; time tables come only after this).
    mt_all = mem_tables(cm, st, keys)
    lay = ZLayout(st.n_pairs, st.n_types, step2)
    zmem, att_ok = _memory_floor(st, lay, mt_all, len(keys))
    mem_lb = np.empty(len(co))
    for p, rows in _by_pp(co):
        c = co.take(rows)
        kk = c.key
        pk = peak_z(st, lay, p, _bcast(c), zmem[kk], mt_all.ws[kk][:, None], kv_free(cm))
        mem_lb[rows] = np.where(att_ok[kk], pk, np.inf).min(axis=1)
    if np.isnan(mem_lb).any():
        raise DecompositionError("memory lower bound is NaN; refusing to prune on it")
    fits = mem_lb <= cm.usable_bytes * (1 + _SLACK)
    if cell_hi is not None:
        cell_hi = np.minimum(cell_hi, _memory_cap(cm, st, lay, co, zmem, att_ok,
                                                  mt_all.ws))
    cert.pruned_memory = int((~fits).sum())
    # Smallest-memory strategies of the combinations nearest to fitting: what is reported when
    # nothing is feasible (the evaluator then names the limits they break); built only then.
    co_all = co

    def closest() -> list[np.ndarray]:
        return _closest_actions(st, co_all, mt_all, np.argsort(mem_lb, kind="stable")[:32])

    check_time()
    if not fits.any():
        cert.wall_s = time.perf_counter() - t0
        return ExactSolution(None, 0.0, [], [], closest(), cert)
    co = co.take(np.flatnonzero(fits))
    if cell_hi is not None:
        cell_hi = cell_hi[fits]
    used_keys, co_key = np.unique(co.key, return_inverse=True)
    co.key = co_key.reshape(-1)
    keys = keys.take(used_keys)
    cert.settings = len(keys)
    # 3a. Tables per setting (in chunks) and, from per-group minima, a lower bound on every
    #     candidate's features per attention choice; candidates themselves are built lazily.
    n_opt = max(len(st.g_opts), len(st.d_opts), NUM_CHOICES)
    per_key = N_HUB * n_opt * (lay.size + 1) + N_LAYOUTS * N_HUB * st.n_types
    kstep = max(1, KEY_CHUNK_CELLS // per_key)
    emb_t = np.empty(len(keys))
    emb_t2 = np.empty(len(keys)) if step2 else None
    ws = np.empty(len(keys))
    zlb = np.full((len(keys), NUM_CHOICES, lay.size), np.inf)
    kc = SettingCache() if setting_cache is None else setting_cache
    ids = _setting_ids(keys)
    hit = np.array([i_ in kc.floors for i_ in ids], dtype=bool)
    for h in np.flatnonzero(hit).tolist():
        zlb[h], emb_t[h], e2, ws[h] = kc.floors[ids[h]]
        if emb_t2 is not None:
            emb_t2[h] = e2

    def tables_of(idx: np.ndarray) -> tuple[MemTables, list[StepTables]]:
        ks = keys.take(idx)
        mt = mem_tables(cm, st, ks)
        tabs = [main_step_tables(cm, st, ks)]
        if step2:
            tabs.append(step_tables(cm, st, ks, second=True))
        cert.table_rows += sum(t.rows for t in tabs)
        emb_t[idx] = tabs[0].emb_t
        if emb_t2 is not None:
            emb_t2[idx] = tabs[1].emb_t
        ws[idx] = mt.ws
        return mt, tabs

    # The floors need no per-candidate arrays, so their chunks can be larger (fewer, longer
    # calls of the cost model's layer code).
    fstep = max(kstep, FLOOR_CHUNK_CELLS // (N_HUB * n_opt * 4))
    todo = np.flatnonzero(~hit)
    for s in range(0, len(todo), fstep):
        idx = todo[s:s + fstep]
        zlb[idx] = feature_floor(st, *tables_of(idx))
        for h in idx.tolist():
            kc.floors[ids[h]] = (zlb[h].copy(), float(emb_t[h]),
                                 float(emb_t2[h]) if emb_t2 is not None else np.nan,
                                 float(ws[h]))
        # Rows per setting are fixed by the model's structure, so after the first chunk the
        # rows every remaining setting will build are known: stop now rather than later.
        done = s + len(idx)
        check_time(upcoming=cert.table_rows // done * (len(todo) - done))
    # 4a. Upper bound per combination: the floor's objective, best attention choice.
    ub = np.zeros(len(co))
    for p, rows in _by_pp(co):
        ub[rows] = _floor_objective(cm, st, lay, p, co.take(rows), zlb, emb_t, ws, emb_t2)
    if np.isnan(ub).any():
        raise DecompositionError("objective upper bound is NaN; refusing to prune on it")
    check_time()
    # 4b. Solve in decreasing bound order; candidates of a setting are built on first use.
    ub_cell = None
    if cell_hi is not None:
        ub_cell = _cell_bounds(cm, st, lay, co, cell_hi, zlb, emb_t, ws, emb_t2)
        cert.batch_cells += int((cell_hi > co.batch).sum())
    order = np.argsort(-ub, kind="stable")
    cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    best = float(incumbent)
    found = 0.0
    curve: list[np.ndarray] = []
    top: list[tuple[float, int, np.ndarray]] = []          # (objective, row, dims)
    rej: list[tuple[float, int, np.ndarray]] = []
    i = 0
    n_rows = len(order)
    grow = 64
    while i < n_rows:
        if ub[order[i]] <= 0.0 or ub[order[i]] * (1 + _SLACK) < best:
            break
        chunk = order[i:i + grow]
        i += len(chunk)
        grow = min(grow * 2, 4096)
        rows = chunk[(ub[chunk] > 0.0) & (ub[chunk] * (1 + _SLACK) >= best)]
        new = np.unique(co.key[rows])
        new = new[[int(k_) not in cache for k_ in new]]
        for k_ in new[[ids[int(k_)] in kc.cands for k_ in new]]:
            cache[int(k_)] = kc.cands[ids[int(k_)]]
        new = new[[int(k_) not in cache for k_ in new]]
        for s in range(0, len(new), kstep):
            idx = new[s:s + kstep]
            cand = _candidates(st, build_parts(st, *tables_of(idx)), 0)
            cert.candidates += len(cand.z)
            bounds = np.searchsorted(cand.key, np.arange(len(idx) + 1))
            for j, k_ in enumerate(idx):
                cache[int(k_)] = kc.cands[ids[int(k_)]] = (cand.z[bounds[j]:bounds[j + 1]],
                                                           cand.dims[bounds[j]:bounds[j + 1]])
            check_time()
        for p in np.unique(co.pp_idx[rows]):
            rr = rows[co.pp_idx[rows] == p]
            start = 0
            while start < len(rr):
                stop, pairs = start, 0
                while stop < len(rr) and (stop == start or pairs + len(
                        cache[int(co.key[rr[stop]])][0]) <= PAIR_CHUNK):
                    pairs += len(cache[int(co.key[rr[stop]])][0])
                    stop += 1
                sub = rr[start:stop]
                start = stop
                zs = [cache[int(k_)][0] for k_ in co.key[sub]]
                rep = np.array([len(z_) for z_ in zs])
                row_of = np.repeat(sub, rep)
                z = np.concatenate(zs)
                c = co.take(row_of)
                kr = c.key
                r = evaluate_z(cm, st, lay, int(p), c, z, emb_t[kr], ws[kr],
                               None if emb_t2 is None else emb_t2[kr])
                cert.pairs_evaluated += len(z)
                obj = r["objective"]
                if not len(obj):
                    continue
                curve.append(np.maximum.accumulate(np.maximum(obj, best)))
                dims = np.concatenate([cache[int(k_)][1] for k_ in co.key[sub]])
                best = max(best, float(obj.max()))
                found = max(found, float(obj.max()))
                for q in np.argsort(-obj, kind="stable")[:keep * 4]:
                    if obj[q] > 0:
                        top.append((float(obj[q]), int(row_of[q]), dims[q]))
                raw = np.where(r["feasible"], -np.inf, np.nan_to_num(r["raw"], nan=-np.inf))
                for q in np.argsort(-raw, kind="stable")[:keep]:
                    if np.isfinite(raw[q]):
                        rej.append((float(raw[q]), int(row_of[q]), dims[q]))
                if len(top) > 64 * keep:
                    top = sorted(top, key=lambda t: -t[0])[:keep * 4]
                if len(rej) > 64 * keep:
                    rej = sorted(rej, key=lambda t: -t[0])[:keep]
        cert.solved += len(rows)
        if progress is not None:
            progress(len(rows))
        check_time()
    cert.pruned_bound = n_rows - cert.solved
    open_cells = None
    if ub_cell is not None and cell_hi is not None:
        r_open = np.flatnonzero((ub_cell > 0.0) & (ub_cell * (1 + _SLACK) >= best))
        open_cells = (co.actions[r_open, :BATCH_HEAD].copy(), co.batch[r_open].astype(np.int64),
                      cell_hi[r_open].astype(np.int64))

    def action(row: int, dims: np.ndarray) -> np.ndarray:
        a = np.empty(ACTION_LEN, dtype=np.int64)
        a[:NUM_COARSE] = co.actions[row]
        a[NUM_COARSE:] = dims
        return a

    top.sort(key=lambda t: -t[0])
    seen: set[int] = set()
    top_actions = []
    for _, row, dims in top:
        if row not in seen:                    # one per degree combination
            seen.add(row)
            top_actions.append(action(row, dims))
        if len(top_actions) >= keep:
            break
    rej.sort(key=lambda t: -t[0])
    rej_actions = [action(r_, d_) for _, r_, d_ in rej[:keep]]
    cert.wall_s = time.perf_counter() - t0
    curve_all = np.concatenate(curve) if curve else np.zeros(0)
    if found <= 0.0 or not top_actions:
        # Combinations fit but none meets the SLOs: beside the smallest-memory ones, those
        # whose feature floor comes nearest to the SLOs (the evaluator names what they break).
        near = _nearest_slo_rows(cm, st, lay, co, zlb, emb_t, ws, emb_t2) if explain \
            else np.zeros(0, dtype=np.int64)
        fit_rows = np.flatnonzero(fits)
        near_actions = []
        if len(near):
            # Their smallest-memory choices, and Megatron's layout (faster, so nearer a
            # latency SLO; the evaluator ranks them and drops a layout a rule forbids).
            near_actions = _closest_actions(st, co_all, mt_all, fit_rows[near])
            near_actions += [np.concatenate([co_all.actions[r], np.asarray(MEGATRON_DIMS,
                                                                           dtype=np.int64)])
                             for r in fit_rows[near]]
        return ExactSolution(None, 0.0, [], rej_actions, near_actions + closest(), cert,
                             curve_all, open_cells)
    return ExactSolution(top_actions[0], found, top_actions, rej_actions, [], cert, curve_all,
                         open_cells)


#: Batches of the first pass of :func:`solve_any_batch`: every integer up to this, then one
#: per octave (plus the multiples of every DP degree's odd part, :func:`batch_grid`).
FIRST_PASS_DENSE_UPTO = 4
#: Pieces each open batch cell is split into per branch-and-bound round of
#: :func:`solve_any_batch` (:func:`_split_cells`).
CELL_SPLIT = 4


def _first_pass_space(sp: StrategySpace) -> StrategySpace:
    """``sp`` with the coarser batch grid of :func:`solve_any_batch`'s first pass (the
    same largest batch, and every DP degree up to it, the smallest batch that degree
    allows): its cells are wider, and branch and bound splits those that the grid's bound
    does not close, so fewer batches get tables built."""
    top = max(sp.batch_values)
    grid = batch_grid(sp.dp_values, (top - 1).bit_length(),
                      dense_upto=FIRST_PASS_DENSE_UPTO, steps_per_octave=1)
    return replace(sp, batch_values=tuple(sorted(
        {b for b in grid if b <= top} | {d for d in sp.dp_values if d <= top} | {top})))


#: Strategies the first pass of :func:`solve_any_batch` keeps per runner-up asked for: its
#: best are often one set of degrees at neighbouring batches of the grid (Mixtral-8x7B on 8
#: H100s, every degree up to 8: its best 5 were two sets of degrees), and the runners-up
#: are the best of distinct degrees.
FIRST_PASS_KEEP = 4


def solve_any_batch(cm: CostModel, time_limit_s: float | None = None, keep: int = 5,
                    verify_samples: int = 64, progress: ProgressFn | None = None,
                    work_limit: int | None = None) -> tuple[ExactSolution, StrategySpace]:
    """:func:`solve`, certified over every integer batch when ``cm.space.any_batch``.

    1. Solve over a coarser batch grid than the space's (:func:`_first_pass_space`: every
       integer to :data:`FIRST_PASS_DENSE_UPTO`, then one per octave and the DP multiples;
       the same largest batch), bounding every *cell* — the multiples of dp between a
       combination's batch and the next grid batch of the same degrees — by
       :func:`_cell_bounds`.
    2. Branch and bound on the cells whose bound reaches the best so far: each is split
       into up to :data:`CELL_SPLIT` pieces at multiples of dp (:func:`_split_cells`); each
       cut point is solved exactly like any grid batch and bounds the piece above it, while
       the cell's lower end bounds the first piece; pieces whose bound falls below the best
       are closed. More pieces per round mean fewer rounds, each of which pays the fixed cost
       of one :func:`solve` (4 pieces: the same optima as halving on the eight cases of
       ``bench/plan_speed.py``, 5–25% less wall time). When no cell is open, every integer
       batch ``1 … max(grid)`` is either solved or bounded below the optimum.

    Returns:
        ``(solution, space)``: the solution's action vectors index ``space`` — the
        problem's space with the integer batches the reported strategies use added
        (:meth:`StrategySpace.with_batches`); ``cm.space`` itself when it is not
        ``any_batch``.

    Raises:
        ExactTimeout, ExactWorkLimit, DecompositionError: as :func:`solve`.
    """
    t0 = time.perf_counter()
    full_sp = cm.space
    if full_sp.any_batch:
        cm = copy.copy(cm)
        cm.space = _first_pass_space(full_sp)
    sp = cm.space
    kc = SettingCache()
    # The grid's best strategies include neighbouring batches of the same degrees (more of
    # them where DP candidates of odd degree add their multiples to the grid), so the first
    # pass keeps several per runner-up wanted, and the runners-up are its distinct degrees.
    sol = solve(cm, time_limit_s, keep * FIRST_PASS_KEEP if sp.any_batch else keep,
                verify_samples, progress, work_limit, cells=sp.any_batch, setting_cache=kc)
    cert = sol.certificate
    cert.any_batch = sp.any_batch
    if not sp.any_batch:
        return sol, sp
    best = sol.best_objective
    found = [sp.decode(a) for a in sol.top]     # priced together below (_objectives)
    rej = [sp.decode(a) for a in sol.rejected]
    curves = [sol.curve]
    none = np.empty(0, dtype=np.int64)
    deg, lo, hi = sol.open_cells if sol.open_cells is not None else (
        np.empty((0, BATCH_HEAD), dtype=np.int64), none, none)
    cm2 = copy.copy(cm)
    while len(lo):
        cert.batch_cells_open += len(lo)
        dpv = np.asarray(sp.dp_values, dtype=np.int64)[deg[:, DP_HEAD]]
        batches, tops, cell = _split_cells(lo, hi, dpv, CELL_SPLIT)
        sp2 = sp.with_batches(np.unique(batches).tolist())
        only = np.empty((len(batches), NUM_COARSE), dtype=np.int64)
        only[:, :BATCH_HEAD] = deg[cell]
        only[:, BATCH_HEAD] = np.searchsorted(np.asarray(sp2.batch_values), batches)
        cm2.space = sp2
        left = None if time_limit_s is None else max(
            time_limit_s - (time.perf_counter() - t0), 1e-3)
        work_left = None if work_limit is None else max(work_limit - cert.work, 0)
        sol2 = solve(cm2, left, keep, 0, progress, work_left, incumbent=best, only=only,
                     cells=True, tops=tops, setting_cache=kc, explain=False)
        c2 = sol2.certificate
        cert.batch_integers_solved += c2.solved
        for name in ("settings", "table_rows", "candidates", "pairs_evaluated"):
            setattr(cert, name, getattr(cert, name) + getattr(c2, name))
        found += [sp2.decode(a) for a in sol2.top]
        rej += [sp2.decode(a) for a in sol2.rejected]
        if len(sol2.curve):
            curves.append(np.maximum(sol2.curve, best))
        best = max(best, sol2.best_objective)
        assert sol2.open_cells is not None
        deg, lo, hi = sol2.open_cells
    # The runners-up's degrees at every batch of the space's own grid too (the branch and
    # bound refines only the cells that reach the optimum; a runner-up is then at least as
    # good as the best grid batch of its degrees). A batch bounded below the worst runner-up
    # cannot improve any of them, so that is the incumbent.
    pool = list(zip(_objectives(cm2, full_sp, found), found, strict=True))
    alts = _distinct(pool)[1:keep]
    if alts:
        worst = min(max(o for o, y in pool if _degrees(y) == _degrees(x)) for x in alts)
        at = full_sp.with_batches([x.batch for x in alts])     # degree indices unchanged
        only = np.array([[*(at.encode(x)[:BATCH_HEAD]), b] for x in alts
                         for b in range(len(full_sp.batch_values))], dtype=np.int64)
        cm2.space = full_sp
        left = None if time_limit_s is None else max(
            time_limit_s - (time.perf_counter() - t0), 1e-3)
        work_left = None if work_limit is None else max(work_limit - cert.work, 0)
        try:        # the optimum is certified already: past a limit, keep what was found
            sol3 = solve(cm2, left, keep, 0, progress, work_left, incumbent=worst,
                         only=only, setting_cache=kc, explain=False)
        except (ExactTimeout, ExactWorkLimit):
            sol3 = None
        if sol3 is not None:
            for name in ("settings", "table_rows", "candidates", "pairs_evaluated"):
                setattr(cert, name, getattr(cert, name) + getattr(sol3.certificate, name))
            more = [full_sp.decode(a) for a in sol3.top]
            pool += list(zip(_objectives(cm2, full_sp, more), more, strict=True))
    cert.wall_s = time.perf_counter() - t0
    # Best first; equal objectives (to 12 digits) keep the grid's strategy, found first.
    top = _distinct(pool)[:keep]
    rej = rej[:keep]
    near = [sp.decode(a) for a in sol.closest]
    final = full_sp.with_batches([x.batch for x in top + rej + near])
    enc = lambda xs: [final.encode(x) for x in xs]  # noqa: E731
    if not top:
        return ExactSolution(None, 0.0, [], enc(rej), enc(near), cert,
                             np.concatenate(curves)), final
    return ExactSolution(enc(top)[0], best, enc(top), enc(rej), [], cert,
                         np.concatenate(curves)), final


def _split_cells(lo: np.ndarray, hi: np.ndarray, dp: np.ndarray, parts: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split each open cell ``(lo, hi]`` (``[n]`` batches; multiples of its ``dp`` apart)
    into up to ``parts`` pieces for one round of :func:`solve_any_batch`'s branch and bound.

    The cut points are ``lo + ⌈i·(hi − lo) / (parts·dp)⌉·dp`` for ``i = 1 … parts − 1`` (the
    middle multiple of ``dp`` for ``parts = 2``), duplicates dropped. Each piece starts at a
    batch that is solved exactly (``lo`` again, to bound its own piece, and every cut point)
    and ends one ``dp`` below the next cut point, the last at ``hi``.

    Returns:
        ``(batches, tops, cell)``: ``[m]`` each piece's first batch, its last batch (the cell
        top :func:`solve` bounds it to) and the index of the cell it came from; every cell's
        first pieces, then every cell's second, and so on.

    Raises:
        ValueError: ``parts < 2``.
    """
    if parts < 2:
        raise ValueError(f"a cell splits into at least 2 parts, got {parts}")
    n = len(lo)
    i = np.arange(1, parts, dtype=np.int64)[None, :]
    cuts = lo[:, None] + -(-(hi - lo)[:, None] * i // (parts * dp[:, None])) * dp[:, None]
    pts = np.concatenate([lo[:, None], cuts], axis=1)                      # [n, parts]
    keep = np.ones(pts.shape, dtype=bool)
    keep[:, 1:] = pts[:, 1:] != pts[:, :-1]              # cut points are non-decreasing
    # A dropped duplicate's piece is empty; the piece before it runs to the next kept one.
    top = np.empty_like(pts)
    run = hi.copy()
    for j in range(parts - 1, -1, -1):
        top[:, j] = np.where(keep[:, j], run, top[:, j])
        run = np.where(keep[:, j], pts[:, j] - dp, run)
    cell = np.broadcast_to(np.arange(n)[:, None], pts.shape)
    return pts.T[keep.T], top.T[keep.T], cell.T[keep.T]


def _distinct(pool: list[tuple[float, Strategy]]) -> list[Strategy]:
    """The strategies of ``pool`` with a positive objective, best first, one per distinct
    ``(tp, ep, pp, dp, cp)``."""
    seen: set[tuple[int, ...]] = set()
    out: list[Strategy] = []
    for o, x in sorted(pool, key=lambda t: -float(f"{t[0]:.12g}")):
        key = _degrees(x)
        if o > 0 and key not in seen:
            seen.add(key)
            out.append(x)
    return out


def _degrees(x: Strategy) -> tuple[int, int, int, int, int]:
    """``(tp, ep, pp, dp, cp)``: what tells runners-up apart."""
    return (x.tp, x.ep, x.pp, x.dp, x.cp)


def _objectives(cm: CostModel, space: StrategySpace, xs: list[Strategy]) -> list[float]:
    """``evaluate_many`` objectives of the strategies ``xs`` of ``space`` (any integer
    batches), in one call (empty list: none)."""
    if not xs:
        return []
    cm = copy.copy(cm)
    cm.space = space.with_batches([x.batch for x in xs])
    return [float(v) for v in cm.evaluate_many(np.array([cm.space.encode(x) for x in xs]))
            .objective]


def coarse_grid(sp: StrategySpace) -> np.ndarray:
    """Every coarse index row of ``sp`` whose ``(tp, cp)`` pair meets the
    ``context_parallel`` rule, ``[M, NUM_COARSE]``, in the lexicographic order of the full
    product of the heads (the rows the full product would keep after that rule, without
    building the product: with ``cp`` it is up to ``len(cp_values)`` times larger)."""
    tpv = np.asarray(sp.tp_values, dtype=np.int64)
    ok = sp.cp_ok(tpv[:, None], np.asarray(sp.cp_values, dtype=np.int64)[None, :])  # [T, C]
    n_cp = ok.sum(axis=1)
    cp_of = np.zeros((len(tpv), max(int(n_cp.max()), 1)), dtype=np.int64)
    for t in range(len(tpv)):
        cp_of[t, :n_cp[t]] = np.flatnonzero(ok[t])
    heads = [len(sp.tp_values), len(sp.ep_values), len(sp.pp_values), len(sp.dp_values)]
    grids = np.meshgrid(*[np.arange(v) for v in heads], indexing="ij")
    outer = np.stack([g.ravel() for g in grids], axis=1).astype(np.int64)
    nb = len(sp.batch_values)
    reps = n_cp[outer[:, 0]] * nb
    rows = np.repeat(outer, reps, axis=0)
    j = np.arange(len(rows)) - np.repeat(np.cumsum(reps) - reps, reps)
    out = np.empty((len(rows), NUM_COARSE), dtype=np.int64)
    out[:, :CP_HEAD] = rows
    out[:, CP_HEAD] = cp_of[rows[:, 0], j // nb]
    out[:, BATCH_HEAD] = j % nb
    return out


def _cell_tops(sp: StrategySpace, coarse: np.ndarray) -> np.ndarray:
    """Per valid coarse row ``[M, NUM_COARSE]``: the largest multiple of dp below the next valid
    grid batch of the same degrees (or up to the grid's largest batch), ``[M]``; the row's *cell*
    is the multiples of dp in ``(batch, top]`` (empty when ``top <= batch``)."""
    bvals = np.asarray(sp.batch_values, dtype=np.int64)
    dpv = np.asarray(sp.dp_values, dtype=np.int64)[coarse[:, DP_HEAD]]
    b = bvals[coarse[:, BATCH_HEAD]]
    cap = int(bvals.max())
    order = np.lexsort((b,) + tuple(coarse[:, h] for h in range(BATCH_HEAD - 1, -1, -1)))
    nxt = np.full(len(b), cap + 1, dtype=np.int64)
    if len(order) > 1:
        same = (coarse[order[1:], :BATCH_HEAD] == coarse[order[:-1], :BATCH_HEAD]).all(axis=1)
        nxt[order[:-1]] = np.where(same, b[order[1:]], cap + 1)
    return ((np.minimum(nxt - 1, cap)) // dpv) * dpv


def _memory_cap(cm: CostModel, st: Structure, lay: ZLayout, co: Coarse, zmem: np.ndarray,
                att_ok: np.ndarray, ws: np.ndarray) -> np.ndarray:
    """Per coarse row, the largest multiple of dp whose memory lower bound still fits at
    these degrees, ``[M]`` (the bound of :func:`_memory_floor`, with resident sequences
    ``b / dp`` per rank, or ``ceil(b / (dp · tp))`` under a sequence split, and the row's
    workspace, which never decreases with the batch). Every stage's floor is
    ``A + B · b/dp + C · ceil(b/(dp·tp))`` with one of ``B``, ``C`` zero per attention
    choice, so the cap is closed-form."""
    out = np.zeros(len(co), dtype=np.int64)
    kvf = kv_free(cm)
    usable = cm.usable_bytes * (1 + _SLACK)
    sp = cm.space
    for p, rows in _by_pp(co):
        cls = st.classes[p]
        assert cls is not None
        _, ntyp, first, last, _ = cls
        c = co.take(rows)
        z = zmem[c.key]                                               # [R, 3, F]
        a = (z[..., lay.w] @ ntyp.T + first * z[..., lay.ew][..., None]
             + last * (z[..., lay.lw] * c.lw_factor[:, None])[..., None]
             + ws[c.key][:, None, None])
        b_all = (z[..., lay.kv] @ ntyp.T) / kvf
        b_seq = (z[..., lay.kv_seq] @ ntyp.T) / kvf
        room = usable - a
        with np.errstate(divide="ignore", invalid="ignore"):
            k_all = np.where(b_all > 0, np.floor(room / b_all), np.where(room >= 0, 2**40, -1))
            k_seq = np.where(b_seq > 0, np.floor(room / b_seq), np.where(room >= 0, 2**40, -1))
        d = sp.degrees_many(c.actions)
        grp = Mesh.head_groups(d["tp"], d["cp"]).astype(np.float64)  # sequence-split groups
        k = np.minimum(k_all, k_seq * grp[:, None, None]).min(axis=2)   # [R, 3] sequences/rank
        k = np.where(att_ok[c.key], k, -1).max(axis=1)
        dpv = d["dp"]
        out[rows] = (np.clip(k, -1, 2**40) * dpv).astype(np.int64)
    return out


def _cell_bounds(cm: CostModel, st: Structure, lay: ZLayout, co: Coarse, cell_hi: np.ndarray,
                 zlb: np.ndarray, emb_t: np.ndarray, ws: np.ndarray,
                 emb_t2: np.ndarray | None) -> np.ndarray:
    """Upper bound on the objective of every batch in each row's cell, ``[M]`` (0: empty or
    infeasible).

    For ``b`` in ``(batch, cell_hi]`` at the same degrees, every time and memory feature is
    at least its value at ``batch`` (tokens per rank, resident sequences, micro-batches and
    the workspace never decrease with the batch, and the cost model's per-token terms are
    non-decreasing in tokens; the all-integer brute-force tests check it), and the requests a
    step carries, ``b · share``, are at most ``cell_hi · share(batch)`` (``share`` never
    increases with the batch). So the row's feature floor evaluated with the numerator at
    ``cell_hi`` bounds the whole cell; a cell whose latency or memory floor already breaks a
    limit is empty. A closed loop's wait in TTFT (``Coarse.queued``) is the one term that
    falls as the batch grows, so it is taken at ``cell_hi``, its least in the cell (its TPOT
    factor at the floor, its ``1 / share`` at ``batch``, both least there too).
    """
    out = np.zeros(len(co))
    nonempty = cell_hi > co.batch
    for p, rows in _by_pp(co):
        rows = rows[nonempty[rows]]
        if not len(rows):
            continue
        c = co.take(rows)
        c.batch = cell_hi[rows]
        # The clients waiting per running request fall as the batch grows: the cell's least
        # is at its top, so TTFT's wait is bounded below there.
        c.queued = cm.closed_loop_queue(c.devices, c.batch)
        out[rows] = _floor_objective(cm, st, lay, p, c, zlb, emb_t, ws, emb_t2)
    if np.isnan(out).any():
        raise DecompositionError("batch-cell upper bound is NaN; refusing to prune on it")
    return out


def _floor_objective(cm: CostModel, st: Structure, lay: ZLayout, p: int, c: Coarse,
                     zlb: np.ndarray, emb_t: np.ndarray, ws: np.ndarray,
                     emb_t2: np.ndarray | None) -> np.ndarray:
    """Objective of the rows' feature floors ``zlb[c.key]`` (``[K, 3, F]``), best attention
    choice, at pp index ``p``: an upper bound on every candidate of each row, ``[R]``."""
    kk = c.key
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        r = evaluate_z(cm, st, lay, p, _bcast(c), np.where(np.isinf(zlb[kk]), 1e300, zlb[kk]),
                       emb_t[kk][:, None], ws[kk][:, None],
                       None if emb_t2 is None else emb_t2[kk][:, None])
    return np.where(np.isfinite(zlb[kk]).all(axis=2), r["objective"], 0.0).max(axis=1)


def _nearest_slo_rows(cm: CostModel, st: Structure, lay: ZLayout, co: Coarse,
                      zlb: np.ndarray, emb_t: np.ndarray, ws: np.ndarray,
                      emb_t2: np.ndarray | None, n: int = 32) -> np.ndarray:
    """The ``n`` rows of ``co`` whose feature floors (best attention choice) come nearest to
    the workload's SLOs: least ``max(TPOT / TPOT SLO, TTFT / TTFT SLO)`` at the floor, a
    lower bound on every candidate's; empty without an SLO. Explains an answer where every
    combination fits in memory but none meets the SLOs."""
    slos = aggregate.slo_limits(cm.workload)
    if not slos:
        return np.zeros(0, dtype=np.int64)
    worst = np.full(len(co), np.inf)
    for p, rows in _by_pp(co):
        c = co.take(rows)
        kk = c.key
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            r = evaluate_z(cm, st, lay, p, _bcast(c),
                           np.where(np.isinf(zlb[kk]), 1e300, zlb[kk]),
                           emb_t[kk][:, None], ws[kk][:, None],
                           None if emb_t2 is None else emb_t2[kk][:, None])
            ratio = np.max([r[name.removesuffix("_slo")] / slo
                            for name, slo in slos.items()], axis=0)
        ratio = np.where(np.isnan(ratio) | ~np.isfinite(zlb[kk]).all(axis=2), np.inf, ratio)
        worst[rows] = ratio.min(axis=1)
    ok = np.flatnonzero(np.isfinite(worst))
    return ok[np.argsort(worst[ok], kind="stable")[:n]]


def _bcast(c: Coarse) -> Coarse:
    """Coarse rows as ``[M, 1]`` arrays (to broadcast against ``[M, C, F]`` features)."""
    return Coarse(**{k: (v[:, None] if k != "actions" else v)
                     for k, v in c.__dict__.items()})


def _closest_actions(st: Structure, co: Coarse, mt, rows: np.ndarray) -> list[np.ndarray]:
    """Smallest-memory choices at the given combinations (to explain infeasibility)."""
    out = []
    for row in rows:
        k = int(co.key[row])
        dims = np.full(NUM_OPS, REPLICATED, dtype=np.int64)
        for op in range(NUM_OPS):
            cost = sum(mt.dW[t][k, op] for t in range(st.n_types))
            if op == Op.ATTENTION:
                cost = sum(mt.KV[t][k] for t in range(st.n_types))
            elif op == Op.EMBEDDING:
                cost = mt.EW[k]
            elif op == Op.LM_HEAD:
                cost = mt.LW[k]
            cost = np.where(mt.allowed[k, op], cost, np.inf)
            dims[op] = int(np.argmin(cost))
        if st.engine_ok:        # an engine runs its own layout: Megatron's is always one
            dims = np.asarray(MEGATRON_DIMS, dtype=np.int64)
        out.append(np.concatenate([co.actions[row], dims]))
    return out


class ExactSearcher:
    """The exact optimum (``method="exact"``): see the module docstring.

    Args:
        time_limit_s: raise :class:`ExactTimeout` past this many seconds (``None``: no limit).
        verify_samples: random strategies on which the decomposition is checked against
            ``evaluate_many`` before searching.
        work_limit: raise :class:`ExactWorkLimit` past this much work
            (:attr:`Certificate.work`; ``None``: no limit).
        keep: how many best distinct-degree strategies to report (the optimum and
            ``keep - 1`` runners-up; 1 skips solving the runners-up at every batch).

    Raises:
        ValueError: ``keep`` is not an integer >= 1.
    """

    name = "exact"
    #: The result does not depend on the seed (``l2s compare`` runs it once).
    deterministic = True

    def __init__(self, time_limit_s: float | None = None, verify_samples: int = 64,
                 work_limit: int | None = None, keep: int = 5) -> None:
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
            raise ValueError(f"keep: an integer >= 1 (the optimum and its runners-up), "
                             f"got {keep!r}")
        self.time_limit_s = time_limit_s
        self.verify_samples = verify_samples
        self.work_limit = work_limit
        self.keep = keep

    def search(self, cost_model: CostModel, budget: int | None, seed: int,
               progress: ProgressFn | None = None) -> SearchResult:
        """Solve exactly (``budget`` and ``seed`` do not apply: the search is deterministic
        and not limited by evaluations). ``SearchResult.evaluations`` counts the complete
        strategies evaluated — by the decomposition (each equal to an ``evaluate_many`` row) and
        by ``evaluate_many`` to confirm and report the result — and ``curve`` is the best
        feasible objective after each, in that order; the certificate in ``notes`` breaks the
        work down (table rows, degree combinations pruned and solved).

        When ``cost_model.space.any_batch`` and the optimum (or a reported runner-up) has a
        batch between the grid's candidates, those batches are added to
        ``cost_model.space`` (:meth:`StrategySpace.with_batches`) so that the result's action
        vectors decode; action vectors built on the space before the call must be re-encoded
        (their batch index may shift).

        Returns:
            A :class:`SearchResult` whose best is the optimum; ``notes`` carry the
            :class:`Certificate` as ``exact_*`` keys.

        Raises:
            ExactTimeout: past the time limit.
            ExactWorkLimit: past the work limit.
            DecompositionError: the decomposition disagrees with the cost model.
        """
        t0 = time.perf_counter()
        sol, space = solve_any_batch(cost_model, time_limit_s=self.time_limit_s,
                                     keep=self.keep, verify_samples=self.verify_samples,
                                     progress=progress, work_limit=self.work_limit)
        if space is not cost_model.space:
            cost_model.space = space
        ev = BudgetedEvaluator(cost_model, None)
        rows = list(sol.top) + list(sol.rejected) + list(sol.closest)
        if rows:
            ev.evaluate_many(np.array(rows))
        cert = sol.certificate
        if sol.best_action is not None:
            got = float(cost_model.evaluate_many(sol.best_action[None, :]).objective[0])
            cert.optimum_rel_err = abs(got - sol.best_objective) / sol.best_objective
            if cert.optimum_rel_err > 1e-9:
                raise DecompositionError(
                    f"exact optimum {cost_model.space.decode(sol.best_action).short()} solved "
                    f"at {sol.best_objective!r} tokens/s/device but evaluate_many gives {got!r}")
        res = ev.result(self.name, seed, notes=cert.notes())
        res.evaluations += len(sol.curve)
        best = float(sol.curve[-1]) if len(sol.curve) else 0.0
        res.curve = np.concatenate([sol.curve, np.maximum(res.curve, best)])
        res.wall_s = time.perf_counter() - t0
        return res


def try_exact(cost_model: CostModel, time_limit_s: float | None = None,
              work_limit: int | None = DEFAULT_WORK_LIMIT) -> SearchResult | None:
    """The exact optimum if it is found within the limits, else ``None``.

    For reports that measure other searchers against the optimum ("fraction of optimum"):
    ``result.best_objective`` is the optimum (0 when nothing is feasible) and
    ``result.notes`` carry the certificate. With only ``work_limit`` (the default) whether
    ``None`` is returned is a deterministic function of the problem.

    Args:
        cost_model: the problem.
        time_limit_s: seconds allowed (``None``: no wall-clock limit).
        work_limit: work allowed (:attr:`Certificate.work`; ``None``: no limit).

    Returns:
        The exact :class:`SearchResult`, or ``None`` when a limit was hit.

    Raises:
        DecompositionError: the decomposition disagrees with the cost model (a bug to report,
            not an intractable problem).
    """
    try:
        return ExactSearcher(time_limit_s=time_limit_s,
                             work_limit=work_limit).search(cost_model, None, 0)
    except ExactLimitExceeded:
        return None


register("exact", ExactSearcher)

__all__ = ["DEFAULT_WORK_LIMIT", "Certificate", "ExactLimitExceeded", "ExactSearcher",
           "ExactSolution", "ExactTimeout", "ExactWorkLimit", "SettingCache", "pareto_mask",
           "solve", "try_exact"]

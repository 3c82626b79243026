"""Human-readable rendering of a :class:`Plan` with rich tables (units converted here only)."""

from __future__ import annotations

import math
import re
from typing import cast

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..cost.model import Estimate
from ..engines import runs_two_batch_overlap
from ..parallel.ops import CHOICE_NAMES, OP_NAMES, Op
from ..serving.load import grows_without_bound, keeps_up_with_open_loop
from ..units import format_ms, to_gib, to_ms
from ..workload import Phase
from .plan import (
    MARGINAL_HEADROOM_FRACTION,
    Plan,
    memory_headroom,
    one_output_token,
    stage_rows,
    weights_label,
)

_MOE_OPS = {Op.ROUTER, Op.EXPERT_UP, Op.EXPERT_DOWN, Op.SHARED_EXPERT_UP,
            Op.SHARED_EXPERT_DOWN}


def _ms(x: float) -> str:
    """Seconds as :func:`~learn_to_shard.units.format_ms` (``—`` for none)."""
    return "—" if x is None or math.isnan(x) else format_ms(x)


def _unit(plan: Plan) -> str:
    return "prompt tok/s/device" if plan.workload.phase is Phase.PREFILL else "tok/s/device"


def _unit_words(plan: Plan) -> str:
    """:func:`_unit` in words, for the summary's throughput row."""
    return ("prompt tokens/s per device" if plan.workload.phase is Phase.PREFILL
            else "tokens/s per device")


#: The engine host-time fields the engine line names: (field, display scale, unit, whether
#: only steps that carry prompt tokens pay it).
_HOST_TERMS: tuple[tuple[str, float, str, bool], ...] = (
    ("host_step_overhead_s", 1e3, "ms per step", False),
    ("host_seq_overhead_s", 1e6, "µs per sequence", False),
    ("host_prefill_overhead_s", 1e3, "ms per prompt", True),
    ("eager_layer_overhead_s", 1e3, "ms per layer of a prompt step", True))


def _host_terms(cfg: dict[str, object], phase: Phase) -> str:
    """The engine host time a plan's steps carry, as a clause of the engine line (empty when
    the profile has none): ``host_step_overhead_s`` per step, ``host_seq_overhead_s`` per
    sequence in a step, ``host_prefill_overhead_s`` per prompt admitted, and
    ``eager_layer_overhead_s`` per layer of a step that carries prompt tokens (the fitted
    engine overheads, :mod:`learn_to_shard.cost.config`); the decode phase has no prompt
    steps, so its clause names neither prompt term."""
    parts = [f"{value * scale:g} {unit}" for key, scale, unit, prompt_only in _HOST_TERMS
             if (value := float(cast(float, cfg.get(key) or 0.0)))
             and not (prompt_only and phase is Phase.DECODE)]
    return f", host time {' + '.join(parts)}" if parts else ""


def _frontend_clause(cfg: dict[str, object]) -> str:
    """The engine line's front-end clause of a serve plan (empty when the profile has none):
    ``frontend_latency_s`` per request in TTFT and ``frontend_serial_s`` per request taken in
    one at a time, with the request rate that caps one instance at (its inverse)."""
    latency = float(cast(float, cfg.get("frontend_latency_s") or 0.0))
    serial = float(cast(float, cfg.get("frontend_serial_s") or 0.0))
    parts = ([f"{to_ms(latency):g} ms per request in TTFT"] if latency else []) + (
        [f"{to_ms(serial):g} ms per request taken in one at a time (at most {1.0 / serial:,.0f} "
         f"requests/s per instance)"] if serial else [])
    return f", front-end {' + '.join(parts)}" if parts else ""


def _tbo_clause(plan: Plan) -> str:
    """The engine line's two-batch-overlap clause. The engines run it only with expert
    parallelism, SGLang only with an all-to-all backend too
    (:func:`~learn_to_shard.engines.runs_two_batch_overlap`, which the cost model prices it
    by): where the best plan is not such a layout the clause says it is not priced, and why."""
    a2a = bool(plan.cost_model.get("moe_a2a_kernel"))
    if plan.engine == "sglang" and not a2a:
        return ", two-batch overlap (not priced: SGLang runs it only with --moe-a2a)"
    if plan.best is not None and not runs_two_batch_overlap(plan.engine,
                                                             plan.best.strategy.ep, a2a):
        return ", two-batch overlap (not priced: the best plan has EP 1, and it needs EP)"
    return ", two-batch overlap"


def render_plan(plan: Plan, console: Console | None = None) -> None:
    """Print the plan: headline, degrees, placements with collectives, latency, memory, SLO
    margins, alternatives and the best rejected strategies with reasons."""
    con = console or Console()
    wl = plan.workload
    # Model and cluster names are user text (a cluster file's "name"): escaped, not markup.
    head = (f"[bold]{escape(plan.model)}[/] on [bold]{escape(plan.cluster)}[/] · {wl.phase.value} "
            + (f"context={wl.isl}" if wl.phase is Phase.DECODE else
               f"isl={wl.isl}" if wl.phase is Phase.PREFILL else f"isl={wl.isl} osl={wl.osl}")
            + f" · weights {weights_label(plan)}"
            + (f" (experts {plan.expert_weight_bits:g}-bit)" if plan.expert_weight_bits else "")
            + f", KV {wl.kv_dtype.value} · method {plan.method_used}"
            + (f" (asked: {plan.method})" if plan.method != plan.method_used else ""))
    con.print(head)
    if plan.model_source or plan.weights:
        con.print(f"model {plan.model_source} · weights {plan.weights}", markup=False,
                  highlight=False)
    if plan.cost_model:
        cfg = plan.cost_model
        con.print(f"engine {plan.engine or 'defaults'}: memory utilisation "
                  f"{cfg['memory_utilization']:g}, KV fraction {cfg['kv_cache_free_fraction']:g}"
                  # The step budget and the KV policy shape only serve steps: a decode plan
                  # prices steady decoding at its context, a prefill plan whole prompts.
                  + (f", max {cfg['max_num_batched_tokens']} batched tokens, KV sized "
                     + ("per whole request" if cfg["kv_reserve_full_request"]
                        else "at mean occupancy (paged)")
                     if plan.workload.phase is Phase.SERVE else "")
                  + (f", MoE all-to-all {str(cfg.get('moe_a2a_kernel')).replace('_', ' ')}"
                     if cfg.get("moe_a2a_kernel") else "")
                  + (_tbo_clause(plan) if cfg.get("two_batch_overlap") else "")
                  + _host_terms(cfg, plan.workload.phase)
                  + (_frontend_clause(cfg) if plan.workload.phase is Phase.SERVE else "")
                  + (f", experts: {plan.moe_routing}" if plan.moe_routing else ""),
                  highlight=False)
    s = plan.search
    wall_s = cast(float, s.get("wall_s", 0))
    con.print(f"searched {s.get('evaluations')} strategies in {float(wall_s):.2f} s "
              f"(space {s.get('space_size'):.3g})")
    from ..fidelity.accuracy import accuracy_line

    con.print(f"[dim]{escape(accuracy_line(plan.workload.phase, plan.engine))}[/]",
              highlight=False)
    factors = plan.cost_model or {}
    algo = factors.get("collective_algorithm")
    if algo and algo != "alpha-beta":
        won = s.get("collective_setting") or factors.get("collective_setting") or algo
        extra = "".join(f", {name.replace('_', ' ')}" for name in
                        ("sequence_parallel", "gemm_overlap") if factors.get(name))
        why = ("; without --engine one setting, each collective at the device's cheapest "
               "algorithm" if plan.engine is None and won == "auto" else "")
        con.print(f"collectives: {won} ({algo} pricing{extra}{why})", highlight=False,
                  markup=False)
    if not plan.feasible or plan.best is None:
        con.print("[bold red]No feasible plan.[/]")
        under = False                  # the closest candidate's own violations, indented
        for r in plan.reasons:
            if r.startswith("closest candidate") and r.endswith(":"):
                con.print(f"  • {r}", markup=False)
                under = True
            elif under and re.match(r"[a-z_]+: ", r):      # a violation, "rule: what"
                con.print(f"      – {r}", markup=False)
            else:
                under = False
                con.print(f"  • {r}", markup=False)
        if plan.class_limits:        # what the search left out for the model's class
            con.print(f"note: {plan.class_limits}", highlight=False, markup=False)
        return
    e = plan.best
    _render_estimate(con, plan, e, title="Best strategy")
    for note in plan.notes:
        con.print(f"note: {note}", highlight=False, markup=False)
    if plan.alternatives:
        t = Table(title="Top alternatives", show_lines=False)
        for col in ("strategy", _unit(plan), "TPOT", "TTFT", "mem/device"):
            t.add_column(col)
        one = one_output_token(plan.workload)
        for a in plan.alternatives:
            t.add_row(a.strategy.short(), f"{a.tokens_per_s_per_device:,.1f}",
                      "n/a" if one else _ms(a.tpot_s), _ms(a.ttft_s),
                      f"{to_gib(a.memory.total_bytes):.1f} GiB")
        con.print(t)
    if plan.rejected:
        t = Table(title="Best rejected strategies and why")
        t.add_column("strategy")
        t.add_column(f"would give ({_unit(plan)})")
        t.add_column("why rejected")
        for rej in plan.rejected:
            t.add_row(rej.strategy.short(), f"{rej.tokens_per_s_per_device:,.1f}",
                      "\n".join(rej.violations))
        con.print(t)
    if plan.alternatives or plan.rejected:
        dp_word = "attention-DP" if plan.moe_routing else "replicas of a dense model"
        con.print(f"[dim]strategy: tp ep pp dp ({dp_word}) [cp (decode context parallelism, "
                  "shown when > 1)] b (sequences per instance), then "
                  "one choice per operator in order " + ", ".join(OP_NAMES)
                  + ": 0 = Shard(0), 1 = Shard(1), ∅ = Replicate()[/]")


def estimate_summary(plan: Plan, e: Estimate) -> list[tuple[str, str]]:
    """The plan's summary of one estimate as ``(quantity, value)`` rows of plain text, the
    same on the console (:func:`render_plan`) and in the report
    (:func:`~learn_to_shard.report.html.plan_sections`): degrees, devices (idle ones
    named), throughput per device (and per device in use) and per instance, TPOT and TTFT
    with their SLO margins and the closed loop's wait, pipeline stage times, memory per
    device, headroom (:data:`MARGINAL_LABEL` under :data:`MARGINAL_HEADROOM_FRACTION`),
    per-stage layers and memory, KV capacity in tokens and the longest context, tokens/s per
    user, and the largest batch."""
    s = e.strategy
    wl = plan.workload
    rows: list[tuple[str, str]] = []

    def add(quantity: str, value: str) -> None:
        rows.append((quantity, value))

    cp = f"  decode-CP={s.cp}" if s.cp > 1 else ""
    if plan.moe_routing:
        add("degrees", f"TP={s.tp}  EP={s.ep} (ETP={s.etp})  PP={s.pp}  "
            f"attention-DP={s.dp}{cp}  batch={s.batch}")
    else:
        # A dense model's DP ranks share nothing: they are replicas (the export launches
        # one server each).
        add("degrees", f"TP={s.tp}  PP={s.pp}  DP={s.dp}{cp}  batch={s.batch}"
            + (f" ({s.dp} replicas of {s.batch // s.dp}: a dense model has no "
               f"attention-DP)" if s.dp > 1 and s.batch % s.dp == 0 else
               f" ({s.dp} replicas: a dense model has no attention-DP)"
               if s.dp > 1 else ""))
    replicas = f", {s.dp} replicas of {s.devices // s.dp}" \
        if not plan.moe_routing and s.dp > 1 else ""
    add("devices", f"{s.devices} per instance{replicas} × {e.instances} "
        f"instance{'s' if e.instances != 1 else ''}"
        + (f" ({e.idle_devices} idle)" if e.idle_devices else ""))
    # Per device counts the idle devices too (the cluster's throughput over all of them);
    # with some idle, the line says so and what the devices in use run at: the cluster's
    # tokens/s over them (not one instance's over its devices: a closed loop of fewer clients
    # than the replicas' batches loads some replicas partly, CostModel's replica_fraction).
    used = s.devices * e.instances
    idle = (f"; over all {used + e.idle_devices} devices, {e.idle_devices} idle: "
            f"{e.tokens_per_s_per_device * (used + e.idle_devices) / used:,.1f} per device "
            f"in use" if e.idle_devices and used else "")
    # A closed loop whose clients spend the front-end time outside the engine completes
    # fewer requests than its batch slots would (aggregate.latency's clients' bound).
    slots_bound = e.output_tokens_per_s * min(
        e.instances, wl.concurrency / max(s.batch, 1) if wl.concurrency else e.instances) \
        / max(used + e.idle_devices, 1)
    frontend = sum(float(str(plan.cost_model.get(k, 0.0) or 0.0))
                   for k in ("frontend_latency_s", "frontend_serial_s"))
    clients = (f"; {wl.concurrency} client{'s' if wl.concurrency != 1 else ''} each "
               f"{_ms(frontend)} in the front-end per request bound it (the batch slots "
               f"alone: {slots_bound:,.1f} per device)"
               if wl.concurrency and frontend > 0
               and f"{e.tokens_per_s_per_device:,.1f}" != f"{slots_bound:,.1f}" else "")
    add("throughput", f"{e.tokens_per_s_per_device:,.1f} {_unit_words(plan)}  "
        f"({e.instance_tokens_per_s:,.0f} per instance{idle}{clients})")
    one_token = one_output_token(wl)
    if one_token:
        add("TPOT", f"n/a (one output token per request; the mean step is "
            f"{_ms(e.tpot_s)})")
    elif not math.isnan(e.tpot_s):
        # An SLO met within aggregate.SLO_REL_TOL shows a margin of 0, not -0.00.
        margin = (f"  (SLO {_ms(wl.tpot_slo_s)}, margin "
                  f"{_ms(max(0.0, wl.tpot_slo_s - e.tpot_s))})") if wl.tpot_slo_s else ""
        add("TPOT", _ms(e.tpot_s) + margin)
    if not math.isnan(e.ttft_s):
        margin = (f"  (SLO {_ms(wl.ttft_slo_s)}, margin "
                  f"{_ms(max(0.0, wl.ttft_slo_s - e.ttft_s))})") if wl.ttft_slo_s else ""
        queue = ""
        if e.ttft_queue_s > 0 and wl.concurrency is not None:
            slots = e.instances * s.batch
            queue = (f"  (of which {_ms(e.ttft_queue_s)} waiting for a batch slot: "
                     f"{wl.concurrency} clients, {slots} slots)")
        add("TTFT", _ms(e.ttft_s) + margin + queue)
    add("pipeline", f"{s.pp} stage(s), {e.micro_batches} micro-batch(es), "
        f"stage times " + ", ".join(_ms(x) for x in e.stage_time_s[:8])
        + (" …" if len(e.stage_time_s) > 8 else ""))
    m = e.memory
    # TensorRT-LLM's KV pool is a fraction f of the memory left after weights and workspace:
    # a batch's KV needs KV / f of it, and the rest stays out of the pool.
    f = float(str(plan.cost_model.get("kv_cache_free_fraction", 1.0)))
    held = m.kv_cache_bytes * (1.0 / f - 1.0) if 0.0 < f < 1.0 else 0.0
    add("memory/device", f"{to_gib(m.total_bytes):.1f} of {to_gib(m.usable_bytes):.1f}"
        f" GiB usable on stage {m.stage}: weights {to_gib(m.weight_bytes):.1f}, "
        f"KV of this batch {to_gib(m.kv_cache_bytes):.1f}, workspace "
        f"{to_gib(m.workspace_bytes):.2f} GiB"
        + (f"; the engine's KV pool is {f:g} of the free memory, so this batch's "
           f"KV also needs {to_gib(held):.1f} GiB free outside the pool (not in the "
           f"{to_gib(m.total_bytes):.1f} GiB above)" if held else ""))
    free, marginal = memory_headroom(e)
    # The pool is f of what weights and workspace leave; the engine keeps the rest out of it.
    kept_out = (1.0 - f) * (m.usable_bytes - m.weight_bytes - m.workspace_bytes) \
        if held else 0.0
    add("headroom", f"{to_gib(free):.1f} GiB free per device on stage {m.stage}"
        + (f" ({to_gib(min(kept_out, free)):.1f} of it outside the KV pool, which "
           f"takes {f:g} of the memory weights and workspace leave)"
           if held else "")
        + (f"  {MARGINAL_LABEL}: under {MARGINAL_HEADROOM_FRACTION:.0%} of usable; "
           + marginal_consequence(e, s.batch) if marginal else ""))
    if plan.num_layers is not None and s.pp > 1:
        add("stages", "; ".join(
            f"{i}: layers {r['layers'][0]}–{r['layers'][1]}, "
            f"{to_gib(float(r['memory_bytes'] or 0)):.1f} GiB"
            for i, r in enumerate(stage_rows(e, plan.num_layers)) if r["layers"])
            + (f" (counted as the limit counts them: weights, workspace and KV ÷ {f:g})"
               if held else ""))
    if e.kv_capacity_unbounded:
        add("KV capacity", f"unbounded in tokens: every attention layer keeps a "
            f"fixed window per sequence, so the pool bounds the sequences (max "
            f"batch below), not their length; longest context "
            f"{e.max_context_tokens:,} tokens (the model's maximum positions)")
    else:
        whole = s.batch * (wl.isl + wl.osl)
        peak = (f"; whole requests of isl + osl = {wl.isl + wl.osl:,} tokens need "
                f"{whole:,} at this batch: it fits at mean occupancy (isl + osl/2), so the "
                f"engine preempts or queues requests when many near their end together"
                if wl.phase is Phase.SERVE and whole > e.kv_capacity_tokens else "")
        add("KV capacity", f"{e.kv_capacity_tokens:,} tokens per instance (the "
            f"pool left after weights and workspace); longest context "
            f"{e.max_context_tokens:,} tokens per sequence at batch {s.batch}"
            + peak)
    if wl.phase is not Phase.PREFILL and e.tpot_s > 0 and math.isfinite(e.tpot_s) \
            and not one_token:
        add("per user", f"{1.0 / e.tpot_s:,.1f} tok/s (1 / TPOT)")
    add("max batch", f"{e.max_batch} sequences fit at these degrees")
    return rows


#: The word the headroom row starts its warning with (bold yellow on the console).
MARGINAL_LABEL = "marginal"


def marginal_consequence(e: Estimate, batch: int) -> str:
    """What a :data:`MARGINAL_LABEL` plan risks, for the headroom row. The engines size their
    KV pool from the memory weights and workspace leave, after their own buffers (CUDA
    graphs, communication buffers; a few percent, varying by version and settings): where
    weights and workspace alone leave under :data:`MARGINAL_HEADROOM_FRACTION` of usable
    memory the engine may not start; otherwise those buffers come out of the pool, and the
    server holds fewer than the plan's ``batch`` sequences at once (the rest queue), which is
    not a failure to start."""
    m = e.memory
    room = m.usable_bytes - m.weight_bytes - m.workspace_bytes
    if room < MARGINAL_HEADROOM_FRACTION * m.usable_bytes:
        return (f"weights and workspace leave {to_gib(room):.1f} GiB for the KV pool and the "
                f"engine's own buffers (CUDA graphs, communication buffers), which may not "
                f"fit: the server may not start (more devices per replica, or a smaller "
                f"--max-num-batched-tokens, leave more)")
    return (f"the batch fills the KV pool: the engine's own buffers (CUDA graphs, "
            f"communication buffers; a few percent, by version and settings) come out of "
            f"it, so the server may hold fewer than the {batch} sequences planned at once "
            f"and queue the rest (it starts either way)")


def _render_estimate(con: Console, plan: Plan, e: Estimate, title: str) -> None:
    s = e.strategy
    model_moe = any(c.where.startswith("moe") for c in e.collectives) or s.ep > 1
    summary = Table(title=title, show_header=False)
    summary.add_column("k", style="bold")
    summary.add_column("v")
    for quantity, value in estimate_summary(plan, e):
        text = escape(value)
        if quantity == "headroom":
            text = text.replace(f"  {MARGINAL_LABEL}:", f"  [bold yellow]{MARGINAL_LABEL}[/]:")
        summary.add_row(quantity, text)
    con.print(summary)
    ops = Table(title="Per-operator placement (along TP; experts along ETP)"
                if plan.moe_routing else "Per-operator placement (along TP)")
    ops.add_column("operator")
    ops.add_column("placement")
    ops.add_column("compute / pass")
    for i, name in enumerate(OP_NAMES):
        if Op(i) in _MOE_OPS and not model_moe and name not in e.op_time_s:
            continue
        ops.add_row(name, CHOICE_NAMES[s.dims[i]], _ms(e.op_time_s.get(name, float("nan"))))
    coll = Table(title="Collectives per micro-batch pass")
    for col in ("where", "collective", "group", "each", "× per pass"):
        coll.add_column(col)
    for c in e.collectives:
        coll.add_row(c.where, c.kind, str(c.group), _ms(c.time_s), str(c.per_step))
    if not e.collectives:
        coll.add_row("—", "none", "", "", "")
    con.print(Group(ops, coll))
    if e.violations:
        con.print(Text("violations: " + "; ".join(e.violations), style="red"))


#: Columns of the simulated-serving table (terminal and report alike).
SIMULATION_COLUMNS = ("strategy", "TTFT ms mean/p50/p90/p99", "TPOT ms mean/p50/p90/p99",
                      "ITL ms p50/p99", "E2E s p50/p99", "tok/s/dev", "running", "÷ steady")

#: What ``÷ steady`` means, printed under the table.
STEADY_RATIO_NOTE = ("÷ steady: the simulation's mean TTFT / mean TPOT / tok/s over the "
                     "analytical estimate's at the same number of running requests (an open "
                     "loop's queueing, prefill stalls and bursts are what the steady state "
                     "leaves out, while it counts a closed loop's clients waiting beyond the "
                     "batch; "
                     "fixed-length requests in a closed loop run in lock-step waves, whose "
                     "prompts prefill together while the decodes run undisturbed, so there "
                     "TTFT is well above the steady state of spread arrivals and TPOT and "
                     "tok/s depart from it either way: --range-ratio spreads them).")


def simulation_heading(sims: list[dict]) -> str:
    """One line naming the simulated load and the best plan's replica's share of it, e.g.
    ``closed loop, concurrency 64; best plan: 1 replica(s), one simulated: 64 of 64 clients,
    1000 requests`` (each other row's replicas split the load by their own count)."""
    first = sims[0]
    more = "; the other rows' replicas share the load alike" if len(sims) > 1 else ""
    return (f"{first['load']}; best plan: {first['replicas']} replica(s), one simulated: "
            f"{first['replica_share']}, {first['requests_simulated']} "
            f"request{'' if first['requests_simulated'] == 1 else 's'}{more}")


def simulation_rows(sims: list[dict]) -> list[list[str]]:
    """The cells of the simulated-serving table (:data:`SIMULATION_COLUMNS`), one row per
    simulated plan of ``api.simulate_plan``: latencies in ms (end-to-end in s), a one-token
    output's TPOT and ITL as ``n/a``; a latency of 1 s or more in whole ms."""
    rows = []
    for sim in sims:
        s = sim["simulated"]
        r = sim["sim_over_analytic"]

        def q(name: str, s: dict = s) -> str:
            # Tenths of a ms below 1 s, whole ms above (a queue's TTFT runs to minutes).
            return "/ ".join(f"{v:.1f}" if abs(v) < 1000.0 else f"{v:.0f}" for v in (
                to_ms(s[k]) for k in (f"mean_{name}_s", f"p50_{name}_s", f"p90_{name}_s",
                                      f"p99_{name}_s")))

        # One output token per request has no token after the first: no TPOT or ITL.
        gaps = s["p99_tpot_s"] > 0 or s["p99_itl_s"] > 0
        rows.append([sim["strategy"], q("ttft"), q("tpot") if gaps else "n/a (one token)",
                     f"{to_ms(s['p50_itl_s']):.1f}/ {to_ms(s['p99_itl_s']):.1f}" if gaps
                     else "n/a",
                     f"{s['p50_e2e_s']:.2f}/ {s['p99_e2e_s']:.2f}",
                     f"{sim['tokens_per_s_per_device']:.1f}", f"{s['mean_running']:.1f}",
                     f"{r['mean_ttft']:.2f}×/ " + (f"{r['mean_tpot']:.2f}×" if gaps else "n/a")
                     + f"/ {r['output_tokens_per_s']:.2f}×"])
    return rows


#: Simulated mean TTFT over the steady state's from which a trace within capacity is flagged
#: as queueing in bursts (``simulation_notes``): ten times is no rounding of a steady state.
BURST_TTFT_RATIO = 10.0

#: Share of a replica's steady-state capacity from which a simulated open loop is flagged
#: as near saturation (``simulation_notes``): the latency of an M/G/1-like queue grows as
#: ``1 / (1 − ρ)``, so at ρ = 0.9 a 5% throughput error moves the queueing delay by ~1.5×.
NEAR_CAPACITY = 0.9


def replicas_for_rate(sim: dict, rate_rps: float, load: float = 1.0) -> int | None:
    """Replicas of a simulated plan (instances; a dense model's DP ranks, simulated apart,
    grouped back into its instances) that keep ``rate_rps`` requests/s at or below ``load``
    of a replica's capacity: the steady state's (``capacity_requests_per_s``), or, where the
    simulated queue grew, the lower of it and what the replica served. ``None`` without a
    capacity."""
    cap = replica_capacity(sim)
    if not cap:
        return None
    return max(1, math.ceil(rate_rps / (load * cap) - 1e-9))


def replica_capacity(sim: dict) -> float | None:
    """Requests/s one replica of a simulated plan completes, as :func:`replicas_for_rate`
    counts replicas with: the steady state's ``capacity_requests_per_s`` per simulated
    replica, or, where the simulated queue grew, the lower of it and what the replica
    served, times the DP ranks simulated apart (``None`` without a capacity)."""
    cap = sim.get("capacity_requests_per_s")
    if not cap:
        return None
    served = sim.get("simulated", {}).get("requests_per_s")
    if sim.get("queue_grows") and served:
        cap = min(cap, served)
    return float(cap) * max(1, int(sim.get("dp_ranks_as_replicas") or 1))


def _replicas_needed(sim: dict, load: float = 1.0) -> tuple[int, int, float] | None:
    """``(needed, now, capacity)``: :func:`replicas_for_rate` of the open loop's rate
    (offered to each simulated replica, times their number), the plan's replicas and the
    requests/s per replica counted with (:func:`replica_capacity`); an overloaded plan needs
    more than it has. ``None`` without a rate or capacity."""
    offered = sim.get("offered_requests_per_s")
    if not offered or not sim.get("capacity_requests_per_s"):
        return None
    need = replicas_for_rate(sim, offered * sim["replicas"], load) or 1
    now = max(1, int(sim["replicas"]) // max(1, int(sim.get("dp_ranks_as_replicas") or 1)))
    if sim.get("overloaded"):
        need = max(need, now + 1)
    return need, now, replica_capacity(sim) or math.nan


def _replicas_text(counts: tuple[int, int, float] | None, sim: dict) -> str:
    """``". This rate needs at least 3 replicas of it at 5.3 requests/s each (the steady
    state's capacity; 2 now)"`` (empty without counts), naming which rate
    :func:`replica_capacity` counted with: the steady state's capacity, or what a replica of
    ``sim`` served where its queue grew below it."""
    if counts is None:
        return ""
    need, now, cap = counts
    served = sim.get("simulated", {}).get("requests_per_s")
    ranks = int(sim.get("dp_ranks_as_replicas") or 1)
    basis = "what a replica served in the run" if sim.get("queue_grows") and served \
        and served < (sim.get("capacity_requests_per_s") or 0.0) else \
        "the steady state's capacity"
    if ranks > 1:
        # A dense model's DP ranks are simulated as replicas; the count is of instances.
        return (f". This rate needs at least {need} instance{'s' if need != 1 else ''} of it "
                f"({ranks} DP ranks each) at {cap:.4g} requests/s each ({basis}, its ranks' "
                f"together; {now} now)")
    return (f". This rate needs at least {need} replica{'s' if need != 1 else ''} of it at "
            f"{cap:.4g} requests/s each ({basis}; {now} now)")


#: An alternative's simulated tokens/s per device above this times the best plan's is named
#: in a note (``simulation_notes``): under the load it serves more than the plan ranked first.
SIM_AHEAD = 1.02
#: An alternative's simulated tokens/s per device at or above this times the best plan's,
#: within the SLOs, makes it the plan (``api.prefer_under_load``). Below it the plan keeps
#: the search's order: a fixed-length closed loop's lock-step waves, ``--range-ratio`` and
#: ``--num-prompts`` move the simulated gap between close strategies by a few percent
#: (Qwen3-30B-A3B on 8 H100 at 500 clients: +2.7% at the defaults, +1.5–1.6% at 1,000
#: prompts or ``--range-ratio 0.5``), and the simulation's held-out tokens/s error is a
#: median 18% (``docs/validation.md``).
SWAP_AHEAD = 1.10


def _swapped(sims: list[dict]) -> bool:
    """Whether the simulation rows carry a plan chosen under the load ahead of the searched
    best (``api.prefer_under_load`` marks that row ``chosen_under_load``)."""
    return bool(sims and sims[0].get("chosen_under_load"))


def simulated_alternatives_meeting_slo(sims: list[dict]) -> list[str]:
    """The simulated alternatives (``sims[1:]``, ``api.simulate_plan``'s rows) that meet the
    SLOs on the simulated mean and whose queue does not grow through the run (an overloaded
    open loop keeps no SLO for long; a trace, its whole load, is judged on its replay), by
    strategy string, in the simulation's order."""
    return [sim["strategy"] for sim in sims[1:]
            if isinstance(sim.get("slo"), dict) and sim["slo"].get("met")
            and not grows_without_bound(sim)]


def misses_slo_under_load(sims: list[dict]) -> bool:
    """Whether the simulated best plan (``sims[0]``) misses an SLO on the simulated mean while
    no simulated alternative meets them (``l2s plan`` then exits 4)."""
    slo = sims[0].get("slo") if sims else None
    return isinstance(slo, dict) and bool(slo.get("missed")) \
        and not simulated_alternatives_meeting_slo(sims)


#: Requests per closed-loop client below which a run is mostly its first round (every
#: client's first request at time 0), whose queue wait is about half a steady loop's: under
#: it :func:`simulation_notes` says so. Four rounds put the first round's shortfall under
#: about an eighth of the run's mean.
SHORT_CLOSED_LOOP_ROUNDS = 4


def simulation_notes(sims: list[dict], best_only: bool = False) -> list[tuple[str, str]]:
    """What the reader of the simulated-serving table must know, as ``(kind, text)`` with
    ``kind`` ``warning`` (a trace whose mean lengths are not the planned ``isl``/``osl``, an
    overloaded open loop and the replicas its rate needs, one at
    :data:`NEAR_CAPACITY` of a replica's capacity or more, a trace whose bursts queue, its mean
    TTFT :data:`BURST_TTFT_RATIO` times the steady state's or more, an SLO the best plan misses
    under the load) or ``note`` (clients waiting beyond the running batch, the KV admission rule
    simulated, preemptions, an alternative the simulation has serving more than the best by
    :data:`SIM_AHEAD` or more while keeping the SLOs given, unless the load is an open loop
    the best keeps up with; for
    such a loop, that its tokens/s is the offered load's, not the replica's capacity).
    ``best_only``: the load notes of the best plan (``sims[0]``)
    alone; the SLO warning and the alternatives' note still read every row."""
    out: list[tuple[str, str]] = []
    first = sims[0]
    lengths = first.get("lengths", {})
    # The ÷ steady ratios are over the steady state at the simulated replica's share's mean
    # lengths where those are apart from the planned ones, else at the planned ones.
    at = (f"the simulated replica's share's mean lengths, {lengths['replica_mean_isl']:,.0f} "
          f"/ {lengths['replica_mean_osl']:,.0f}"
          if lengths.get("replica_apart_from_planned") else "the planned lengths")
    if lengths.get("apart_from_planned"):
        out.append(("warning", f"the trace's mean prompt ({lengths['mean_isl']:,.0f} tokens) "
                    f"and output ({lengths['mean_osl']:,.0f}) are not the --isl "
                    f"{lengths['planned_isl']} / --osl {lengths['planned_osl']} the search "
                    f"ranked strategies at: the plan and its steady-state numbers are for those "
                    f"lengths, and the simulation replays the trace's (its ÷ steady "
                    f"ratios are over the steady state at {at}); plan "
                    f"with --trace alone to rank at the trace's lengths"))
    elif lengths.get("replica_apart_from_planned"):
        out.append(("note", f"round-robin deals the simulated replica a share of the trace "
                    f"whose mean prompt ({lengths['replica_mean_isl']:,.0f} tokens) and output "
                    f"({lengths['replica_mean_osl']:,.0f}) are not the trace's "
                    f"({lengths['mean_isl']:,.0f} / {lengths['mean_osl']:,.0f}): its capacity "
                    f"and ÷ steady ratios are at its share's lengths"))
    for sim in sims[:1] if best_only else sims:
        if sim.get("overloaded"):
            offered = sim["offered_requests_per_s"]
            if sim.get("lengths", {}).get("dataset") == "trace":
                out.append(("warning", f"{sim['strategy']} is overloaded: the trace's mean "
                            f"rate, {offered:.4g} requests/s per replica, exceeds the "
                            f"{sim['capacity_requests_per_s']:.4g} a replica completes at the "
                            f"plan's batch: the queue grows through the trace, so its TTFT "
                            f"grows with the trace's length, not a steady state"
                            + _replicas_text(_replicas_needed(sim), sim)))
            else:
                cap = sim.get("capacity_requests_per_s") or math.nan
                # Flagged from the steady state's capacity alone: the run hid the growth.
                grows = sim.get("queue_grows") or not (sim.get("utilization") or 0.0) > 1.0
                what = (f"serves {sim['simulated']['requests_per_s']:.2f} (simulated) of "
                        f"the {offered:.4g} requests/s offered to each replica, its queue "
                        f"growing through the run" if grows else
                        f"the {offered:.4g} requests/s offered to each replica exceed the "
                        f"{cap:.4g} it completes at the plan's batch (steady state), so its "
                        f"queue grows without bound (a run ramps up and drains, so a short "
                        f"one may not show it)")
                out.append(("warning", f"{sim['strategy']} is overloaded: {what}; its TTFT "
                            f"grows with --num-prompts and the percentiles describe the "
                            f"run's length, not a steady state"
                            + _replicas_text(_replicas_needed(sim), sim)))
        elif sim.get("lengths", {}).get("dataset") == "trace" and \
                (sim.get("sim_over_analytic", {}).get("mean_ttft") or 0.0) >= BURST_TTFT_RATIO:
            s_ = sim["simulated"]
            out.append(("warning", f"{sim['strategy']}: the trace's bursts queue: its "
                        f"simulated mean TTFT, {s_['mean_ttft_s']:.3g} s (p99 "
                        f"{s_['p99_ttft_s']:.3g} s), is "
                        f"{sim['sim_over_analytic']['mean_ttft']:.0f}× the steady state's"
                        + (", though its mean rate is within capacity"
                           if sim.get("offered_requests_per_s") else
                           " (its requests arrive at one instant)")
                        + ": requests arriving "
                        "together wait for the ones before them; more replicas, or the "
                        "arrivals spread out, shorten it"))
        elif (sim.get("utilization") or 0.0) >= NEAR_CAPACITY:
            counts = _replicas_needed(sim, NEAR_CAPACITY)
            out.append(("warning", f"{sim['strategy']} runs at "
                        f"{100 * sim['utilization']:.0f}% of the "
                        f"{sim['capacity_requests_per_s']:.4g} requests/s a replica completes "
                        f"at the plan's batch: near saturation the queueing delay grows as "
                        f"1 / (1 − load), so a few percent of throughput error moves the "
                        f"latencies by half or more; leave headroom"
                        + (f" ({counts[0]} replicas of it keep each at or below "
                           f"{100 * NEAR_CAPACITY:.0f}%; {counts[1]} now)" if counts else "")))
        fleet_n = sim.get("fleet_num_prompts")        # set for generated loads alone
        own = sim.get("default_requests_per_replica")
        if fleet_n and own and sim["requests_simulated"] < own:
            near = (sim.get("utilization") or 0.0) >= NEAR_CAPACITY
            idle = sim["replicas"] - fleet_n
            out.append(("warning" if near else "note",
                        f"{sim['strategy']}: the fleet's --num-prompts {fleet_n} over its "
                        f"{sim['replicas']} replicas gives the busiest "
                        f"{sim['requests_simulated']}"
                        + (f" and {idle} none" if idle > 0 else "")
                        + (", near saturation" if near else "")
                        + f": a queue that builds over a longer run does not show in so "
                        f"short a one, and its tokens/s is that run's, ramp-up and drain "
                        f"included (without --num-prompts each replica runs {own})"))
        if sim.get("clients_queued"):
            s_ = sim["simulated"]
            queued = sim["clients_queued"]
            out.append(("note", f"{sim['strategy']}: per replica, {queued} "
                        f"client{'' if queued == 1 else 's'} wait"
                        f"{'s' if queued == 1 else ''} in the queue "
                        f"({sim['max_num_seqs']} running); "
                        f"the wait counts in "
                        f"TTFT (mean {s_['mean_ttft_s']:.3g} s; the plan's TTFT counts it "
                        f"from its batch's turnover): fewer clients per replica "
                        f"(more devices, or a larger batch if it fits) shorten it"))
            clients = queued + int(sim.get("max_num_seqs") or 0)
            rounds = sim["requests_simulated"] / max(clients, 1)
            if rounds < SHORT_CLOSED_LOOP_ROUNDS:
                from ..serving.load import MAX_LOAD_REQUESTS

                ratio = (sim.get("sim_over_analytic") or {}).get("mean_ttft")
                need = SHORT_CLOSED_LOOP_ROUNDS * clients * sim["replicas"]
                out.append(("note", f"{sim['strategy']}: its {clients:,} clients per "
                            f"replica send {rounds:.2g} requests each in this run, so it is "
                            f"mostly its first round, every client's first request arriving "
                            f"at once and waiting its turn: its mean TTFT"
                            + (f" ({ratio:.2f}× the plan's)" if ratio else "")
                            + " is below a steady closed loop's; "
                            + (f"--num-prompts {need:,} or more shows the steady state"
                               if need <= MAX_LOAD_REQUESTS else
                               f"the steady state needs {need:,} prompts, more than "
                               f"--num-prompts takes ({MAX_LOAD_REQUESTS:,}): the plan's "
                               f"TTFT is the steady loop's")))
    offered = first.get("offered_requests_per_s")
    if offered and not first.get("overloaded") and first.get("capacity_requests_per_s") \
            and first.get("lengths", {}).get("dataset") != "trace":
        # An open loop below capacity: the engine serves what it is offered, so its
        # simulated tokens/s measures the offered rate (less the run's ramp and drain, and
        # as sampled), not what the replica could serve.
        mean_osl = float(first.get("lengths", {}).get("mean_osl") or 0.0)
        out.append(("note", f"{first['strategy']}: under the open loop each replica serves "
                    f"what it is offered, {offered:.4g} requests/s × {mean_osl:,.0f} output "
                    f"tokens = {offered * mean_osl:,.0f} tokens/s, less the run's ramp-up "
                    f"and drain and as the Poisson arrivals fall (--seed moves it by a few "
                    f"percent): its simulated tokens/s is that, not the "
                    f"{first['capacity_requests_per_s'] * mean_osl:,.0f} a replica serves "
                    f"at full load (the plan's throughput per instance)"))
    sched = first.get("scheduler", {})
    if "kv_admission" in sched:
        pre = [f"{sim['strategy']}: {sim['scheduler']['preemptions']}" for sim in sims
               if sim.get("scheduler", {}).get("preemptions")]
        how = {"reserve": "a request's whole isl + osl reserved when it is admitted",
               "on_demand": "a paged pool that grows a token per decode and preempts when "
                            "full",
               "no_future_oom": "admitted while no future step can run out of KV"}
        out.append(("note", f"KV admission in the simulation: {sched['kv_admission']} "
                    f"({how.get(sched['kv_admission'], 'see --kv-admission')}; the plan's "
                    f"engine line is the steady-state estimate's accounting)"
                    + (f"; requests preempted when the KV pool ran out ({', '.join(pre)}), "
                       "recomputed when readmitted" if pre else "")))
    # An open loop the best plan keeps up with: every plan that keeps up serves the offered
    # load, and their simulated tokens/s differ by how each run drains, not by capacity.
    keeps_up = keeps_up_with_open_loop(first)
    # Only an alternative that keeps the SLOs under the load (every one without SLOs) is
    # worth naming as serving more.
    ahead = [] if keeps_up else [
        sim for sim in sims[1:] if float(sim.get("tokens_per_s_per_device") or 0.0)
        > SIM_AHEAD * float(first.get("tokens_per_s_per_device") or 0.0)
        and (not isinstance(sim.get("slo"), dict) or sim["slo"].get("met"))]
    if ahead:
        top = max(ahead, key=lambda sim: float(sim["tokens_per_s_per_device"]))
        out.append(("note", f"under this load the simulation has {top['strategy']} serving "
                    f"more than the best plan: {top['tokens_per_s_per_device']:,.1f} against "
                    f"{first['tokens_per_s_per_device']:,.1f} tokens/s per device (the search "
                    f"ranks strategies on the steady state; the simulation's rows are in the "
                    f"order it ranked them"
                    + (", the plan first" if len(sims) > 1 and _swapped(sims) else "")
                    + f"; the plan changes for {SWAP_AHEAD - 1:.0%} or more within the SLOs, "
                    f"less being within what the run's settings move)"))
    slo = first.get("slo")
    if isinstance(slo, dict) and slo.get("missed"):
        ok = simulated_alternatives_meeting_slo(sims)
        out.append(("warning", f"under this load the best plan misses its SLO: "
                    f"{'; '.join(slo['missed'])}. The search checks SLOs on steady-state "
                    f"means; " + (f"the simulated alternative {ok[0]} meets them on the "
                                  f"mean and its queue does not grow." if ok else
                                  "no simulated alternative meets them: lower the load, "
                                  "relax the SLO or add devices.")))
    elif isinstance(slo, dict) and slo.get("p90_missed"):
        out.append(("warning", f"the best plan meets its SLO on the simulated mean but not "
                    f"at p90: {'; '.join(slo['p90_missed'])}. The search checks SLOs on "
                    f"means; for a percentile SLO (as serving benchmarks report it) set a "
                    f"tighter SLO or a lower load and plan again."))
    return out


def render_simulation(sims: list[dict], console: Console | None = None) -> None:
    """Print the request-level simulation of the top plans (``api.simulate_plan``): mean and
    p50/p90/p99 TTFT and TPOT, the median and p99 of the pooled inter-token latency (ITL, as
    the benchmark clients print it), end-to-end latency, throughput, and where the
    steady-state estimate differs from the simulation (:func:`simulation_rows`,
    :func:`simulation_notes`)."""
    con = console or Console()
    if not sims:
        return
    con.print(f"\n[bold]Simulated serving[/] ({escape(simulation_heading(sims))})")
    t = Table(box=None, pad_edge=False, collapse_padding=True)
    for col in SIMULATION_COLUMNS:
        # A narrow terminal wraps a cell after one of its '/ ' (never inside a number) rather
        # than lose its tail (p99) to an ellipsis; the strategy wraps before its layout.
        t.add_column(col, justify="left" if col == "strategy" else "right", overflow="fold")
    for row in simulation_rows(sims):
        t.add_row(*row)
    con.print(t)
    con.print(f"[dim]{escape(STEADY_RATIO_NOTE)}[/]")
    for kind, text in simulation_notes(sims):
        if kind == "warning":
            con.print(f"[bold red]warning:[/] {escape(text)}", highlight=False)
        else:
            con.print(f"[dim]{escape(text)}[/]", highlight=False)

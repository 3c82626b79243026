"""``--report DIR``: a self-contained HTML page and the same content as Markdown.

A report is a list of :class:`Section` (text, tables, PNG figures drawn with matplotlib). The
HTML embeds every figure as a ``data:`` URI, so ``report.html`` opens anywhere on its own;
``report.md`` references the same figures saved beside it as PNG files. Text is escaped with
:func:`html.escape`; figures come from :mod:`matplotlib` (Agg backend).

Builders: :func:`plan_sections` (plan table, the chosen strategy drawn per layer with its
collectives and their cost, memory per stage, the engines' optima, the top plans simulated
under a load), :func:`pareto_sections`
and :func:`compare_sections` (their plots and tables).
"""

from __future__ import annotations

import base64
import html
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cost.model import Estimate
from ..fidelity.accuracy import accuracy_line
from ..parallel.ops import CHOICE_NAMES, OP_NAMES
from ..units import to_gib, to_ms
from ..workload import Phase
from .plan import (
    Plan,
    join_reasons,
    one_output_token,
    weights_label,
)

#: Colour of each placement in the per-layer drawing (Shard(0), Shard(1), Replicate()).
CHOICE_COLOURS = ("#9ecae1", "#fdae6b", "#d9d9d9")


@dataclass
class Figure:
    """One PNG figure: ``name`` (file stem), ``png`` bytes, ``alt`` text."""

    name: str
    png: bytes
    alt: str


@dataclass
class Section:
    """One report section: a title, paragraphs, tables ``(header, rows)``, figures and code
    blocks (preformatted text: launch scripts, shown as written)."""

    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[tuple[list[str], list[list[str]]]] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    code: list[str] = field(default_factory=list)


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def _ms(x: float) -> str:
    if x is None or math.isnan(x):
        return "—"
    ms = to_ms(x)
    return f"{ms:.3g} ms" if ms < 100 else f"{ms:,.0f} ms"


def collectives_by_operator(e: Estimate, is_moe: bool) -> tuple[list[str], dict[str, list[str]]]:
    """The operators of one layer of ``e`` in order (embedding first, LM head last) and, per
    operator, the collectives drawn after it (one line each: where, kind, group, µs each,
    count per pass): a layout change after the operator whose output it converts, the MoE
    dispatch after the router and its combine after the expert down-projection; those of
    no operator (pipeline sends) under ``other``."""
    ffn = ["router", "expert_up", "expert_down", "shared_expert_up", "shared_expert_down"] \
        if is_moe else ["dense_up", "dense_down"]
    ops = ["embedding", "qkv_proj", "attention", "o_proj", *ffn, "lm_head"]
    ops = [o for o in ops if o in e.op_time_s or o in ("embedding", "lm_head")]
    by_src: dict[str, list[str]] = {}
    for c in e.collectives:
        src = c.where.split(" -> ")[0].strip()
        key = next((o for o in ops if src.startswith(o)), "other")
        if src == "layer input":
            key = "embedding"
        elif src == "moe combine":
            key = "expert_down"                  # the experts' outputs return to their tokens
        elif src.startswith("moe"):
            key = "router"
        elif src == "shared_expert":
            key = "shared_expert_down"
        elif src == "last layer":
            key = ops[-2]
        by_src.setdefault(key, []).append(
            f"{c.where}: {c.kind} over {c.group}, {to_ms(c.time_s) * 1e3:.1f} µs × {c.per_step}")
    return ops, by_src


def layer_figure(e: Estimate, is_moe: bool) -> Figure:
    """The chosen strategy drawn per layer: each fused operator as a box coloured by its
    placement (with its compute time per pass), and under it the collectives the layout
    change after it costs (kind, group, time each, count per pass)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = e.strategy
    ops, by_src = collectives_by_operator(e, is_moe)
    rows = len(ops)
    fig, ax = plt.subplots(figsize=(9.0, 0.85 * rows + 1.0))
    ax.set_xlim(0, 10)
    ax.set_ylim(-rows, 1)
    ax.axis("off")
    for i, op in enumerate(ops):
        y = -i
        choice = s.dims[OP_NAMES.index(op)]
        ax.add_patch(plt.Rectangle((0.2, y - 0.35), 3.4, 0.6, color=CHOICE_COLOURS[choice]))
        t = e.op_time_s.get(op, float("nan"))
        ax.text(1.9, y - 0.05, f"{op}: {CHOICE_NAMES[choice]}\n{_ms(t)} / pass",
                ha="center", va="center", fontsize=8)
        for j, line in enumerate(by_src.get(op, [])[:3]):
            ax.text(3.8, y + 0.1 - 0.22 * j, "↓ " + line, fontsize=7, va="center")
    for j, line in enumerate(by_src.get("other", [])[:3]):
        ax.text(3.8, -rows + 0.3 - 0.22 * j, line, fontsize=7)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in CHOICE_COLOURS]
    ax.legend(handles, list(CHOICE_NAMES), loc="upper right", fontsize=7, ncol=3,
              title=f"placement along TP={s.tp} (experts along ETP={s.etp})",
              title_fontsize=7)
    ax.set_title(f"One layer of {s.short()}: operators and the collectives after each",
                 fontsize=9)
    return Figure("layer", _png(fig), "per-layer operator placements and collectives")


def memory_figure(e: Estimate) -> Figure:
    """Memory per pipeline stage (bars, GiB) against the usable budget (line), with the
    worst stage's split into weights, KV cache and workspace."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stages = list(e.stage_memory_bytes) or [e.memory.total_bytes]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9.0, 3.4),
                                 gridspec_kw={"width_ratios": [3, 1.3]})
    a1.bar(range(len(stages)), [to_gib(x) for x in stages], color="tab:blue",
           label="memory per device")
    a1.axhline(to_gib(e.memory.usable_bytes), color="tab:red", linestyle="--",
               label=f"usable {to_gib(e.memory.usable_bytes):.1f} GiB")
    a1.set_xlabel("pipeline stage")
    a1.set_ylabel("GiB per device")
    a1.set_xticks(range(len(stages)))
    a1.legend(fontsize=8)
    m = e.memory
    parts = [("weights", m.weight_bytes), ("KV cache", m.kv_cache_bytes),
             ("workspace", m.workspace_bytes)]
    bottom = 0.0
    for (name, v), col in zip(parts, ("tab:blue", "tab:orange", "tab:green"), strict=True):
        a2.bar([0], [to_gib(v)], bottom=[bottom], color=col, label=name)
        bottom += to_gib(v)
    a2.set_xticks([0], [f"stage {m.stage}"])
    a2.set_ylabel("GiB per device")
    a2.legend(fontsize=7)
    a1.set_title("memory per stage", fontsize=9)
    a2.set_title("worst stage", fontsize=9)
    return Figure("memory", _png(fig), "memory per pipeline stage")


def image_figure(name: str, path: Path, alt: str) -> Figure:
    """A figure from a PNG already written (e.g. ``pareto.png``, ``convergence.png``)."""
    return Figure(name, Path(path).read_bytes(), alt)


def plan_sections(plan: Plan, is_moe: bool, optima: list[dict] | None = None,
                  sims: list[dict] | None = None, launch: str | None = None
                  ) -> list[Section]:
    """Sections of a plan report (see the module docstring); ``sims``, the simulated plans of
    a ``--concurrency`` / ``--request-rate`` / ``--trace`` load, add
    :func:`simulation_sections`; ``launch``, the text ``--export`` prints, a last section
    that holds it as written."""
    wl = plan.workload
    lengths = f"context {wl.isl}" if wl.phase is Phase.DECODE and not wl.osl \
        else f"isl {wl.isl}" if wl.phase is Phase.PREFILL else f"isl {wl.isl}, osl {wl.osl}"
    head = Section("Plan", paragraphs=[
        f"{plan.model} on {plan.cluster}: {wl.phase.value}, {lengths}, "
        f"weights {weights_label(plan)}, KV {wl.kv_dtype.value}; method {plan.method_used}; "
        f"engine {plan.engine or 'none (unrestricted)'}.",
        *([f"Model {plan.model_source}; weights {plan.weights}."]
          if plan.model_source or plan.weights else []),
        accuracy_line(wl.phase, plan.engine) + "."])
    if plan.best is None:
        head.paragraphs.append("No feasible plan: " + join_reasons(plan.reasons))
        return [head]
    e = plan.best
    from .render import estimate_summary

    head.tables.append((["quantity", "value"], [list(r) for r in estimate_summary(plan, e)]))
    alts = [[a.strategy.short(), f"{a.tokens_per_s_per_device:,.1f}",
             "n/a" if one_output_token(wl) else _ms(a.tpot_s), _ms(a.ttft_s)]
            for a in plan.alternatives]
    if alts:
        head.tables.append((["alternative", "tokens/s/device", "TPOT", "TTFT"], alts))
    head.paragraphs += [note[0].upper() + note[1:] + "." for note in plan.notes]
    layer = Section("Strategy per layer", paragraphs=[
        "Each box is one fused operator, coloured by its placement along its group; the "
        "lines after it are the collectives its output layout needs, with the time of one "
        "and how many run per pass."],
        figures=[layer_figure(e, is_moe)],
        tables=[(["where", "collective", "group", "each", "per pass"],
                 [[c.where, c.kind, str(c.group), _ms(c.time_s), str(c.per_step)]
                  for c in e.collectives])])
    mem = Section("Memory", figures=[memory_figure(e)])
    out = [head, layer, mem]
    if optima:
        out.append(Section("Engines", paragraphs=[
            "The best strategy each engine can launch, beside the unrestricted optimum. "
            "The unrestricted optimum is priced without an engine's host and front-end time; "
            "each engine row (its best, and the unrestricted strategy) is priced with that "
            "engine's profile and without the plan's collective, sequence-parallel, "
            "GEMM-overlap and MoE all-to-all options, so the unrestricted strategy's price "
            "there shows how much of the gap is the profile rather than the layouts the "
            "engine cannot launch.",
            *([f"The plan above was chosen under the load in place of the search's "
               f"unrestricted steady-state optimum, {plan.replaced_under_load}; this table "
               f"sets the engines beside that optimum."]
              if plan.replaced_under_load is not None else []),
            *([note] if (note := not_upper_bound_note(optima)) else []),
            *[f"{r['engine']}: {r['architecture_note']}" for r in optima
              if r.get("architecture_note")]],
            tables=[(["engine", "strategy", "tokens/s/device", "× unrestricted",
                      "unrestricted strategy at the engine's costs",
                      "unrestricted optimum needs"],
                     [[f"{r['engine']} {r['version']}", str(r["strategy"] or "none feasible"),
                       f"{r['tokens_per_s_per_device']:,.1f}" if r["strategy"] else "–",
                       f"{r['ratio_to_unrestricted']:.4f}" if r["strategy"] else "–",
                       at_engine_costs(r),
                       "; ".join(r["unrestricted_not_expressible"]) or "nothing"]
                      for r in optima])]))
    out += simulation_sections(sims or [])
    if launch:
        out.append(Section("Launch", paragraphs=["What --export prints: run it as written."],
                           code=[launch]))
    return out


def not_upper_bound_note(optima: list[dict]) -> str | None:
    """The line that says the unrestricted optimum is no upper bound, when an engine row's
    ``ratio_to_unrestricted`` exceeds 1 (its profile prices its own best above it: e.g.
    TensorRT-LLM's KV pool without vLLM's 0.9 memory cap fits a larger batch); ``None``
    otherwise."""
    above = [f"{r['engine']} ({r['ratio_to_unrestricted']:.4f})" for r in optima
             if r["ratio_to_unrestricted"] > 1.0]
    if not above:
        return None
    return (f"Not an upper bound: {', '.join(above)} price(s) above it, as that engine's "
            f"profile prices the plan otherwise (its memory policy, e.g. TensorRT-LLM's KV "
            f"pool without vLLM's 0.9 memory cap, fits a larger batch; its kernel and host "
            f"factors), not a search that missed the unrestricted optimum.")


def latency_figure(sims: list[dict]) -> Figure:
    """TTFT and TPOT of each simulated plan, mean and p50/p90/p99 side by side (ms), from
    ``api.simulate_plan``'s ``simulated`` summaries."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stats = ("mean", "p50", "p90", "p99")
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.2))
    width = 0.8 / max(1, len(sims))
    for ax, name, label in ((axes[0], "ttft", "TTFT"), (axes[1], "tpot", "TPOT")):
        for i, sim in enumerate(sims):
            vals = [to_ms(sim["simulated"][f"{st}_{name}_s"]) for st in stats]
            ax.bar([k + i * width for k in range(len(stats))], vals, width=width,
                   label=sim["strategy"].split(" [")[0])
        ax.set_xticks([k + width * (len(sims) - 1) / 2 for k in range(len(stats))], stats)
        ax.set_ylabel("ms")
        ax.set_title(f"{label} under the load", fontsize=9)
    axes[0].legend(fontsize=7)
    return Figure("latency", _png(fig), "simulated TTFT and TPOT percentiles of the top plans")


def simulation_sections(sims: list[dict]) -> list[Section]:
    """The "Serving under load" section of a plan report: the load, the table of
    :func:`~learn_to_shard.report.render.simulation_rows`, its warnings and notes, and
    :func:`latency_figure`; none without a simulated load."""
    from .render import (
        SIMULATION_COLUMNS,
        STEADY_RATIO_NOTE,
        simulation_heading,
        simulation_notes,
        simulation_rows,
    )

    if not sims:
        return []
    notes = [("Warning: " if kind == "warning" else "") + text
             for kind, text in simulation_notes(sims)]
    return [Section("Serving under load", paragraphs=[
        f"The top plans replayed request by request through the simulation of continuous "
        f"batching: {simulation_heading(sims)}.", STEADY_RATIO_NOTE, *notes],
        tables=[(list(SIMULATION_COLUMNS), simulation_rows(sims))],
        figures=[latency_figure(sims)])]


def at_engine_costs(row: dict, sep: str = "; ") -> str:
    """The ``unrestricted_under_engine_*`` fields of an engine-optimum row as one table cell
    (its tokens/s per device, then, where it is infeasible at the engine's costs, ``sep`` and
    each limit it breaks with its numbers: ``"281.6 tok/s/device, infeasible there; TPOT
    51.20 ms > SLO 44.40 ms"``), for the report and the terminal table alike."""
    tps = row.get("unrestricted_under_engine_tokens_per_s_per_device")
    if tps is None:
        return "degrees not in the engine's space"
    broken = row.get("unrestricted_under_engine_violations") or []
    return f"{tps:,.1f} tok/s/device" + (", infeasible there" if broken else "") + "".join(
        f"{sep}{v.split(': ', 1)[-1]}" for v in broken)


def pareto_sections(title: str, rows: list[dict], plot: Path,
                    no_fit: str | None = None) -> list[Section]:
    """Sections of a ``pareto`` report: the plot, the frontier table (as the terminal's:
    tokens/s per user and per device, TPOT, whether it meets the SLO, servers, each row's
    server command, marked where the engine cannot express all of the layout), or ``no_fit``
    (why no strategy fits) where the frontier is empty, and each row's whole launch script
    (``script``: TensorRT-LLM's YAML, the other nodes' lines and the notes included)."""
    table = [[str(r["strategy"]), f"{r['tokens_per_s_per_user']:.1f}",
              f"{r['tokens_per_s_per_device']:,.1f}", _ms(float(r["tpot_s"])),
              "yes" if r["meets_tpot_slo"] else "no",
              "—" if r.get("servers") is None else str(r["servers"]),
              "—" if r["export"] is None else str(r["export"])
              + (" (NOT EXPRESSIBLE: see its script)" if r.get("not_expressible") else "")]
             for r in rows]
    out = [Section(f"Pareto frontier: {title}", paragraphs=[no_fit] if no_fit else [],
                   figures=[image_figure("pareto", plot,
                                         "tokens/s per device against tokens/s per user")],
                   tables=[(["strategy", "tokens/s/user", "tokens/s/device", "TPOT",
                             "meets TPOT SLO", "servers", "launch"], table)] if rows else [])]
    scripts = [f"# {r['strategy']}\n{r['script']}" for r in rows if r.get("script")]
    if scripts:
        out.append(Section("Launch scripts", code=scripts))
    return out


def compare_sections(data: dict, plot: Path) -> list[Section]:
    """Sections of a ``compare`` report: the convergence plot and the per-method table of
    ``comparison_to_dict`` (mean, best, ratios, evaluations, and the wall time its ``timing``
    key holds; "—" without it)."""
    methods = data.get("methods") or {}
    clock = (data.get("timing") or {}).get("methods") or {}
    rows = []
    for name, m in methods.items():
        wall = (clock.get(name) or {}).get("wall_s_mean")
        ratios = ", ".join(f"{k} {v:.3f}" for k, v in (m.get("ratios") or {}).items()
                           if isinstance(v, (int, float)))
        rows.append([name, f"{m['mean_tokens_per_s_per_device']:,.1f}",
                     f"{m['best_tokens_per_s_per_device']:,.1f}", ratios,
                     f"{m['evaluations_mean']:,.0f}",
                     "—" if wall is None else f"{wall:.2f} s"])
    why = data.get("infeasible_reasons")
    return [Section("Searchers compared", figures=[image_figure(
        "convergence", plot, "best feasible tokens/s per device against evaluations")],
        paragraphs=[f"No method found a feasible strategy: {join_reasons(why)}"] if why else [],
        tables=[(["method", "mean tokens/s/device", "best", "ratios", "evaluations",
                  "wall"], rows)])]


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def write_report(directory: str | Path, title: str, sections: list[Section]) -> tuple[Path, Path]:
    """Write ``report.html`` (figures embedded) and ``report.md`` (+ ``<figure>.png``).

    Returns:
        The two paths.

    Raises:
        OSError: the directory cannot be created or written.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    css = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
           "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;"
           "padding:3px 8px;font-size:13px;text-align:left}th{background:#eee}"
           "img{max-width:100%;border:1px solid #ddd}")
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
             f"</title><style>{css}</style></head><body><h1>{html.escape(title)}</h1>"]
    md = [f"# {title}", ""]
    for sec in sections:
        parts.append(f"<h2>{html.escape(sec.title)}</h2>")
        md += [f"## {sec.title}", ""]
        for p in sec.paragraphs:
            parts.append(f"<p>{html.escape(p)}</p>")
            md += [p, ""]
        for fig in sec.figures:
            (d / f"{fig.name}.png").write_bytes(fig.png)
            b64 = base64.b64encode(fig.png).decode("ascii")
            parts.append(f"<p><img alt='{html.escape(fig.alt)}' "
                         f"src='data:image/png;base64,{b64}'></p>")
            md += [f"![{fig.alt}]({fig.name}.png)", ""]
        for header, rows in sec.tables:
            parts.append(_html_table(header, rows))
            md.append("| " + " | ".join(_md_cell(h) for h in header) + " |")
            md.append("|" + "---|" * len(header))
            md += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
            md.append("")
        for block in sec.code:
            parts.append(f"<pre>{html.escape(block)}</pre>")
            fence = "````" if "```" in block else "```"
            md += [f"{fence}sh", block.rstrip("\n"), fence, ""]
    # Records on <body> how many images decoded, for a browser check (tests/test_report.py).
    parts.append("<script>window.addEventListener('load',function(){var i=[].slice.call("
                 "document.images);document.body.setAttribute('data-images-loaded',i.filter("
                 "function(x){return x.complete&&x.naturalWidth>0}).length+'/'+i.length)})"
                 "</script></body></html>")
    h, m = d / "report.html", d / "report.md"
    h.write_text("\n".join(parts), encoding="utf-8")
    m.write_text("\n".join(md) + "\n", encoding="utf-8")
    return h, m

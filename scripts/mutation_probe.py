"""Mutation probe over the cost-term definitions: is every one-line change caught by a test?

Each mutant is one exact-string replacement in ``cost/terms.py``, ``cost/model.py``,
``cost/comm.py``, ``cost/aggregate.py``, ``parallel/ops.py``, ``parallel/placement.py`` or
``parallel/mesh.py``
(a factor doubled, a term dropped, a ``+``/``-`` swapped, a layout or rank rule changed).
For each, the source tree is copied to a scratch folder, the mutant applied there (the
working tree is never touched), and a fast test subset run against the copy; a mutant is
*killed* when some test fails, a *survivor* otherwise. Results and the reason each survivor
is harmless (or the test that now kills it) are recorded in ``docs/validation.md``
("Mutation probe").

Run (3–8 minutes on two cores; not part of the default test suite)::

    .venv/bin/python scripts/mutation_probe.py            # every mutant
    .venv/bin/python scripts/mutation_probe.py -k norm    # mutants whose label has "norm"

Exit code 0 when every mutant is killed, 1 when one survives, 2 when a mutant's text is not
found exactly once (the definitions moved: update :data:`MUTANTS`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The fast subset run against each mutant: golden and term tests, field cases, shapes,
#: strategy space, the extra-operator worked example.
TESTS = ("tests/test_cost_terms.py", "tests/test_cost_model.py", "tests/test_field_cases.py",
         "tests/test_shapes.py", "tests/test_space.py", "tests/test_space_ops.py",
         "tests/test_cost_snapshot.py", "tests/test_cost_extra_op.py")


@dataclass(frozen=True)
class Mutant:
    """One one-line change: in ``file`` (under ``src/learn_to_shard/``) replace ``old``
    (which must occur exactly once) by ``new``."""

    label: str
    file: str
    old: str
    new: str


M, C, A = "cost/model.py", "cost/comm.py", "cost/aggregate.py"
T = "cost/terms.py"
OD, PL, ME = "parallel/ops.py", "parallel/placement.py", "parallel/mesh.py"
MUTANTS: tuple[Mutant, ...] = (
    Mutant("all-reduce bus bytes x1/2", C, "_BUS_FACTOR = np.array([0.0, 2.0, 1.0, 1.0])",
           "_BUS_FACTOR = np.array([0.0, 1.0, 1.0, 1.0])"),
    Mutant("all-gather bus bytes x2", C, "_BUS_FACTOR = np.array([0.0, 2.0, 1.0, 1.0])",
           "_BUS_FACTOR = np.array([0.0, 2.0, 2.0, 1.0])"),
    Mutant("S(i)->S(j) all-to-all bytes xn", C,
           "per_n = np.where(code == ALL_TO_ALL, frac / n_f, frac)",
           "per_n = np.where(code == ALL_TO_ALL, frac, frac)"),
    Mutant("all-reduce latency steps x1/2", C, "_STEP_FACTOR = np.array([0.0, 2.0, 1.0, 1.0])",
           "_STEP_FACTOR = np.array([0.0, 1.0, 1.0, 1.0])"),
    Mutant("latency steps log2 -> n-1", C, "_STEPS = np.ceil(np.log2(_N_F))",
           "_STEPS = _N_F - 1.0"),
    Mutant("hierarchical a2a: NIC share over NVLink", C,
           "send * (n_f - local) / peers / bw_bytes_per_s)",
           "send * (n_f - local) / peers / scale_up_bw_bytes_per_s)"),
    Mutant("norm all-reduce bytes x2", T, "return self._collective_s(kind, n, rows * 4.0,",
           "return self._collective_s(kind, n, rows * 8.0,"),
    Mutant("GEMM FLOPs x2 (attention-side linear)", T,
           "            fl = 2 * r_loc * w_loc\n            by = w_loc * wb + r_loc * (k_loc + "
           "n_loc) * ab\n            comp = self._roofline(fl, by, (peak",
           "            fl = 4 * r_loc * w_loc\n            by = w_loc * wb + r_loc * (k_loc + "
           "n_loc) * ab\n            comp = self._roofline(fl, by, (peak"),
    Mutant("GEMM activation bytes x2", T,
           "            by = w_loc * wb + r_loc * (k_loc + n_loc) * ab\n            comp = "
           "self._roofline(fl, by, (peak",
           "            by = w_loc * wb + 2 * r_loc * (k_loc + n_loc) * ab\n            comp = "
           "self._roofline(fl, by, (peak"),
    Mutant("replicated weights split", T,
           "w_loc = np.where(choice == 2, params, params / n_grp)\n            k_loc",
           "w_loc = np.where(choice == 2, params / n_grp, params / n_grp)\n            k_loc"),
    Mutant("GQA attention FLOPs x1.5", T,
           "fl = 2 * (att.head_dim + att.v_head_dim) * (heads_dec",
           "fl = 3 * (att.head_dim + att.v_head_dim) * (heads_dec"),
    Mutant("MLA absorbed decode FLOPs +50%", T,
           "span_dec_r * (2 * kv_lora + att.qk_rope_head_dim)",
           "span_dec_r * (3 * kv_lora + 1.5 * att.qk_rope_head_dim)"),
    Mutant("MLA latent cache read twice", T,
           "by = (dec_loc * span_dec_r + pf_loc) * lat * self._kvb",
           "by = (2 * dec_loc * span_dec_r + pf_loc) * lat * self._kvb"),
    Mutant("serve TTFT step carries a whole chunk, not the prompt's mean chunk", M,
           "own = isl / chunk_steps", "own = chunk"),
    Mutant("serve TTFT step leaves out the other running requests' prompt tokens", M,
           "others = np.maximum(dec - 1.0, 0.0) * isl / osl", "others = 0.0 * dec"),
    Mutant("sequence-split attention always splits (no whole-prompt option)", T,
           "split_wins = att_split[sel] + t_kvx[sel] < att_whole",
           "split_wins = att_split[sel] + t_kvx[sel] < att_whole + 1.0"),
    Mutant("block-scaled FP8 cost per local expert dropped", T,
           "r_loc > 0, c.moe_block_overhead_s + self._local_expert_s * e_loc, 0.0)",
           "r_loc > 0, c.moe_block_overhead_s, 0.0)"),
    Mutant("busiest attention-DP rank priced at the ranks' mean", T,
           "busy = pf / r * (1.0 - (1.0 - r) ** np.asarray(dp, dtype=float))",
           "busy = pf + 0 * r * np.asarray(dp, dtype=float)"),
    Mutant("MoE experts see the busiest attention-DP rank's tokens on every rank", T,
           'rows_g = env["rows_mean"] * dp',
           'rows_g = env["rows"] * dp'),
    Mutant("whole prompts beyond tp priced as an even split", T,
           "return np.ceil(isl * (per_rank_lo + (n - lo) * (per_rank_hi - per_rank_lo)))",
           "return np.ceil(np.minimum(env[\"pf\"], np.maximum(isl, env[\"pf\"] / t)))"),
    Mutant("activation pass bytes: gated output x2", T,
           "out = 0.5 if self.model.gated_mlp else 1.0", "out = 1.0"),
    Mutant("kernel overhead x2", T, "        return np.maximum(flops / peak, bytes_ / (hbm or "
           "self._hbm)) \\\n            + self.config.kernel_overhead_s",
           "        return np.maximum(flops / peak, bytes_ / (hbm or self._hbm)) \\\n"
           "            + 2 * self.config.kernel_overhead_s"),
    Mutant("busiest EP rank: no sqrt term", T,
           "np.maximum(mean + np.sqrt(2.0 * mean * np.log(ep_f)), np.minimum(pairs, 1.0))",
           "np.maximum(mean, np.minimum(pairs, 1.0))"),
    Mutant("busiest EP rank streams the mean rank's experts", T,
           "e_loc_f * (1 - (1 - 1 / e_loc_f) ** assign)",
           "e_loc_f * (1 - (1 - 1 / e_loc_f) ** (rows_g * moe.top_k / ep))"),
    Mutant("busiest EP rank: power-law expert load ignored", T,
           "busiest = np.maximum(busiest, power_law_busiest_pairs(",
           "busiest = np.maximum(busiest, 0 * power_law_busiest_pairs("),
    Mutant("busiest EP rank: the power-law load alone, no uniform floor", T,
           "busiest = np.maximum(busiest, power_law_busiest_pairs(",
           "busiest = np.maximum(0 * busiest, power_law_busiest_pairs("),
    Mutant("balanced routing: the mean, not its ceiling", T,
           "np.ceil(mean * (1 - 1e-12)) / mean", "mean / mean"),
    Mutant("registered extra operator term not added to the layer time", T,
           "            total = total + ops[name]\n",
           "            total = total + 0.0 * ops[name]\n"),
    Mutant("serve step-budget share 1 -> 1.2", M,
           "/ (1.0 + float(wl.isl) / float(wl.osl)))",
           "/ (1.2 + float(wl.isl) / float(wl.osl)))"),
    Mutant("serve prompt tokens per step x1/2", M,
           "pf_seqs, pf, ctx = dec / osl, dec * isl / osl, wl.decode_context",
           "pf_seqs, pf, ctx = dec / osl, dec * isl / osl / 2, wl.decode_context"),
    Mutant("host time per sequence counts prefills twice", T,
           "c.host_seq_overhead_s * (dec + pf_seqs)",
           "c.host_seq_overhead_s * (dec + 2 * pf_seqs)"),
    Mutant("host time per prompt x2", T, "+ c.host_prefill_overhead_s * pf_seqs)",
           "+ 2 * c.host_prefill_overhead_s * pf_seqs)"),
    Mutant("eager launch share ignores the decodes' budget", T,
           "room = np.maximum(budget - np.asarray(dec, dtype=float), 1.0)",
           "room = np.maximum(budget + 0 * np.asarray(dec, dtype=float), 1.0)"),
    Mutant("eager launch of one attention-DP rank only", T,
           "np.minimum(1.0, np.asarray(dp) * share)", "np.minimum(1.0, share)"),
    Mutant("pipeline: p2p hops pp instead of pp-1", A,
           "return total + (pp - 1) * p2p, stage_t.max(axis=-1)",
           "return total + pp * p2p, stage_t.max(axis=-1)"),
    Mutant("pipeline: no bubble term in TPOT", A, "tpot = np.maximum(sum_t, m_mb * max_t)",
           "tpot = sum_t"),
    Mutant("prefill makespan m instead of m-1", A, "makespan = sum_t + (m_mb - 1) * max_t",
           "makespan = sum_t + m_mb * max_t"),
    Mutant("KV pool fraction ignored", A,
           "return weight_bytes + kv_bytes / kv_free_fraction + workspace_bytes",
           "return weight_bytes + kv_bytes + workspace_bytes"),
    Mutant("row-parallel output R instead of P", OD,
           "ChoiceDef(Choice.SHARD0, Layout.S1, Layout.P, row[0], row[1]),",
           "ChoiceDef(Choice.SHARD0, Layout.S1, Layout.R, row[0], row[1]),"),
    Mutant("replicated weight: P resolved by all-reduce (R) instead of reduce-scatter", PL,
           "return {Layout.P: Layout.S0, Layout.S1: Layout.R}.get(lay, lay)",
           "return {Layout.P: Layout.R, Layout.S1: Layout.R}.get(lay, lay)"),
    Mutant("head split without the heads rule", OD,
           "ChoiceDef(Choice.SHARD1, Layout.S1, Layout.S1, (HEADS, KV_HEADS)),",
           "ChoiceDef(Choice.SHARD1, Layout.S1, Layout.S1, (KV_HEADS,)),"),
    Mutant("mesh: a group that fills a node exactly straddles", ME,
           "return (ext <= self.devices_per_node) & (self.local_ranks(ext) >= ext)",
           "return (ext < self.devices_per_node) & (self.local_ranks(ext) >= ext)"),
    Mutant("mesh: stage hops never cross nodes", ME,
           "crosses = (first // d != last // d) & (self.num_devices > d)",
           "crosses = (first // d != last // d) & (self.num_devices < 0)"),
)


def _apply(tree: Path, m: Mutant) -> None:
    path = tree / "src" / "learn_to_shard" / m.file
    text = path.read_text()
    if text.count(m.old) != 1:
        raise SystemExit(f"mutant {m.label!r}: its text occurs {text.count(m.old)} times in "
                         f"{m.file} (must be once); update MUTANTS")
    path.write_text(text.replace(m.old, m.new))


def _run(tree: Path, tests: tuple[str, ...], timeout_s: float) -> tuple[bool, float, str]:
    """Run ``tests`` in ``tree`` (its own ``src`` first on the path); returns (some test
    failed, seconds, last line of the pytest output)."""
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    t0 = time.perf_counter()
    try:
        res = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p",
                              "no:cacheprovider", *tests], cwd=tree, env=env,
                             capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return True, time.perf_counter() - t0, "timed out (counted as killed)"
    lines = [x for x in res.stdout.splitlines() if x.strip()]
    return res.returncode != 0, time.perf_counter() - t0, lines[-1] if lines else ""


def main() -> int:
    """Run the probe; print one line per mutant and the survivors."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-k", default="", help="only mutants whose label contains this")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant")
    ap.add_argument("--tests", nargs="+", default=list(TESTS),
                    help=f"test files to run against each mutant (default: {' '.join(TESTS)})")
    args = ap.parse_args()
    tests = tuple(args.tests)
    chosen = [m for m in MUTANTS if args.k in m.label]
    with tempfile.TemporaryDirectory(prefix="l2s-mutants-") as tmp:
        base = Path(tmp) / "clean"
        for part in ("src", "tests", "scripts", "pyproject.toml"):
            src = ROOT / part
            if src.is_dir():
                shutil.copytree(src, base / part, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(src, base / part)
        where = subprocess.run([sys.executable, "-c", "import learn_to_shard; print("
                                "learn_to_shard.__file__)"], cwd=base, capture_output=True,
                               text=True, env=dict(os.environ, PYTHONPATH=str(base / "src")))
        if not where.stdout.strip().startswith(str(base)):
            print(f"the copy is not what gets imported ({where.stdout.strip()})")
            return 2
        failed, secs, last = _run(base, tests, args.timeout)
        print(f"unmutated: {'FAILS' if failed else 'passes'} ({secs:.0f} s) {last}", flush=True)
        if failed:
            return 2
        survivors = []
        for i, m in enumerate(chosen):
            tree = Path(tmp) / f"m{i}"
            shutil.copytree(base, tree)
            _apply(tree, m)
            killed, secs, last = _run(tree, tests, args.timeout)
            print(f"{'killed  ' if killed else 'SURVIVED'} {m.label} ({secs:.0f} s) {last}",
                  flush=True)
            if not killed:
                survivors.append(m.label)
            shutil.rmtree(tree)
    print(f"{len(chosen) - len(survivors)}/{len(chosen)} killed; survivors: "
          f"{', '.join(survivors) or 'none'}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())

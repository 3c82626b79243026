"""One-off check: this tree's ``evaluate_many`` equals an older commit's on the hypothesis
problems of ``tests/test_exact.py``.

The older commit is checked out as a detached ``git worktree`` in a temporary folder; the same
dump (this script with ``--dump``) runs in two subprocesses, one with each tree's ``src/``
first on ``sys.path``. The dump draws the problems with ``tests/test_exact.py``'s
``problems`` strategy (derandomized, so both processes draw the same sequence as long as the
two cost models agree on the values the strategy reads), evaluates seeded random action
vectors on each, and writes every ``BatchEstimate`` field; the parent compares them at a
relative tolerance of 1e-12 (NaN equals NaN; integers and booleans exactly)::

    .venv/bin/python scripts/cost_equivalence.py                 # against the merge-base with main
    .venv/bin/python scripts/cost_equivalence.py --base 0a89b69 --examples 40

Exit code 0 when equal, 1 on a mismatch (the first few are printed), 2 when the older commit
cannot be checked out.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from cost_snapshot import FIELDS  # every BatchEstimate field (scripts/cost_snapshot.py)

ROOT = Path(__file__).resolve().parents[1]
#: Random action vectors evaluated per problem.
ROWS = 512


def dump(out: Path, examples: int) -> None:
    """Draw ``examples`` problems per phase and write their evaluations to ``out`` (npz)."""
    import learn_to_shard

    # The problems come from the dumped tree's own tests/ (its test_exact.py imports that
    # tree's modules), next to the src/ that PYTHONPATH puts first.
    sys.path.insert(0, str(Path(learn_to_shard.__file__).resolve().parents[2] / "tests"))
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from test_exact import problems  # type: ignore[import-not-found]

    from learn_to_shard.workload import Phase

    records: dict[str, list[np.ndarray]] = {f: [] for f in FIELDS}
    tags: list[str] = []
    def make_run(phase: Phase):
        @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(data=st.data())
        def run(data):
            cm = data.draw(problems(max_rows=20_000, phase=phase))
            rng = np.random.default_rng(len(tags))
            a = cm.space.sample(rng, ROWS)
            est = cm.evaluate_many(a)
            m = cm.model
            tags.append(f"{phase.value} {m.hidden_size}h {m.num_layers}L "
                        f"{m.attention.kind.value} {cm.cluster.num_devices}dev "
                        f"hbm={cm.cluster.device.hbm_bytes!r} space={cm.space.nvec.tolist()}")
            for f in FIELDS:
                records[f].append(np.asarray(getattr(est, f)))

        return run

    for phase in Phase:
        make_run(phase)()
    np.savez_compressed(out, tags=np.array(tags),
                        **{f: np.stack(v) if v else np.zeros((0, ROWS))
                           for f, v in records.items()})


def main() -> int:
    """Run the two dumps and compare (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=None, help="older commit (default: merge-base with main)")
    ap.add_argument("--examples", type=int, default=30, help="problems per phase")
    ap.add_argument("--dump", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.dump is not None:
        dump(args.dump, args.examples)
        return 0
    base = args.base or subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=ROOT,
                                       capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        r = subprocess.run(["git", "worktree", "add", "--detach", str(old), base], cwd=ROOT,
                           capture_output=True, text=True)
        if r.returncode:
            print(f"--base: cannot check out {base!r}: {r.stderr.strip()}", file=sys.stderr)
            return 2
        try:
            outs = {}
            for name, src in (("old", old / "src"), ("new", ROOT / "src")):
                outs[name] = Path(tmp) / f"{name}.npz"
                env = {**os.environ, "PYTHONPATH": str(src)}
                subprocess.run([sys.executable, str(Path(__file__).resolve()), "--dump",
                                str(outs[name]), "--examples", str(args.examples)],
                               env=env, check=True)
            with np.load(outs["old"]) as zo, np.load(outs["new"]) as zn:
                bad = []
                if zo["tags"].tolist() != zn["tags"].tolist():
                    bad.append("the two trees drew different problems")
                else:
                    for f in FIELDS:
                        o, n = zo[f], zn[f]
                        ok = (np.isclose(n, o, rtol=1e-12, atol=0.0, equal_nan=True) | (n == o)
                              if o.dtype.kind == "f" else n == o)
                        for p, i in np.argwhere(~ok)[:3]:
                            bad.append(f"{zo['tags'][p]}: {f} row {i}: new {n[p, i]!r} "
                                       f"!= old {o[p, i]!r}")
                n_prob = len(zo["tags"])
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT,
                           capture_output=True)
    if bad:
        print("\n".join(bad[:20]))
        return 1
    print(f"equal at rel 1e-12: {n_prob} problems x {ROWS} action vectors, base {base[:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

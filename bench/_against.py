"""Side-by-side runs of one bench script against an older commit (``--against REV``).

The older commit is checked out as a detached ``git worktree`` in a temporary folder. The
calling script then runs as a child process (``--child``, one JSON line of measurements on
stdout) alternately with that tree's ``src/`` and this tree's ``src/`` first on ``sys.path``,
``rounds`` times each, so both see the same machine load; the best value of each is kept.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_against(rev: str, script: Path, child_args: list[str], rounds: int,
                best: dict[str, str]) -> tuple[dict[str, float], dict[str, float]]:
    """Run ``script --child *child_args`` on commit ``rev`` and on this tree, alternating.

    Args:
        rev: the older commit (anything ``git worktree add`` accepts).
        script: the bench script (this tree's copy runs on both trees).
        child_args: its arguments for one measurement.
        rounds: runs per tree.
        best: per measurement key, ``"max"`` or ``"min"`` (which run counts).

    Returns:
        ``(new, old)``: the best value per key on this tree and on ``rev``.

    Raises:
        SystemExit: ``rev`` cannot be checked out, or a child fails (its stderr is shown).
    """
    with tempfile.TemporaryDirectory(prefix="l2s-bench-") as tmp:
        old_tree = Path(tmp) / "old"
        r = subprocess.run(["git", "worktree", "add", "--detach", str(old_tree), rev],
                           cwd=ROOT, capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"--against: cannot check out {rev!r}: {r.stderr.strip()}")
        try:
            runs: dict[str, list[dict[str, float]]] = {"new": [], "old": []}
            for _ in range(rounds):
                for name, src in (("old", old_tree / "src"), ("new", ROOT / "src")):
                    env = {**os.environ, "PYTHONPATH": str(src)}
                    res = subprocess.run([sys.executable, str(script), "--child", *child_args],
                                         env=env, capture_output=True, text=True)
                    if res.returncode:
                        raise SystemExit(f"{name} tree failed:\n{res.stderr[-2000:]}")
                    runs[name].append(json.loads(res.stdout.strip().splitlines()[-1]))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old_tree)], cwd=ROOT,
                           capture_output=True)
    pick = {"max": max, "min": min}
    out = tuple({k: pick[how](run[k] for run in runs[name]) for k, how in best.items()}
                for name in ("new", "old"))
    return out[0], out[1]

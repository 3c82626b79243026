"""Pin the cost model's held-out accuracy: ``src/learn_to_shard/data/calibration/accuracy.json``.

Runs ``l2s validate`` and ``l2s validate --serving`` (about 75 s) and writes their held-out
medians (:func:`learn_to_shard.fidelity.accuracy.measure`), which every plan prints as its
expected error. Regenerate whenever a change moves a validation median (the tests say so)::

    .venv/bin/python scripts/accuracy_snapshot.py           # rewrite the file
    .venv/bin/python scripts/accuracy_snapshot.py --check   # compare only (exit 1 if it differs)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from learn_to_shard.fidelity.accuracy import ACCURACY_FILE, measure

PATH = Path(__file__).resolve().parents[1] / "src" / "learn_to_shard" / ACCURACY_FILE


def main() -> int:
    """Write or check the file; exit 1 when ``--check`` finds a difference."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare only")
    args = ap.parse_args()
    now = measure()
    if args.check:
        old = json.loads(PATH.read_text(encoding="utf-8"))
        if old != now:
            print(f"differs from {PATH}:\n  pinned {json.dumps(old)}\n  now    "
                  f"{json.dumps(now)}")
            return 1
        print(f"equal to {PATH}")
        return 0
    PATH.write_text(json.dumps(now, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""scripts/mutation_probe.py: its mutants still apply, and (slow) every one is killed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import mutation_probe  # noqa: E402


def test_every_mutant_applies_to_exactly_one_place():
    """The probe's mutants track the cost-term definitions: each text occurs once."""
    pkg = ROOT / "src" / "learn_to_shard"
    for m in mutation_probe.MUTANTS:
        assert (pkg / m.file).read_text().count(m.old) == 1, m.label
        assert m.old != m.new, m.label


@pytest.mark.slow
def test_every_mutant_is_killed():
    """The full probe (3–8 min): ``.venv/bin/python scripts/mutation_probe.py``."""
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "mutation_probe.py")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:]

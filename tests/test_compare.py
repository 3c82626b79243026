"""``l2s compare``'s run store: which output folders it refuses, and how it says so."""

from __future__ import annotations

import json

import pytest

from learn_to_shard.errors import PlannerError
from learn_to_shard.report.compare import RUN_FORMAT, RunStore


def test_out_of_another_problem_is_named_as_such(tmp_path):
    """Without --resume, a folder holding runs of another problem is refused as that (not with
    a hint to resume it)."""
    a = RunStore(tmp_path, {"model": "a"})
    a.runs_dir.mkdir(parents=True)
    a.path("random", 0).write_text(json.dumps({"format": RUN_FORMAT,
                                               "fingerprint": {"model": "a"}, "result": {}}))
    with pytest.raises(PlannerError, match="add --resume"):
        a.check(resume=False)
    with pytest.raises(PlannerError, match="another problem; choose another --out"):
        RunStore(tmp_path, {"model": "b"}).check(resume=False)

"""Worked example: a toy extra operator priced through its definition alone.

The toy operator is a "sequence gate" after attention that needs every sequence of the step on
every TP rank: under a sequence split of attention (``Shard(0)``) it all-gathers ``rows ·
hidden · GATE`` 16-bit activations over the TP group; otherwise it costs nothing. Its price is
one function registered in :data:`learn_to_shard.cost.terms.EXTRA_LAYER_TERMS` (here with
``monkeypatch``, as a new operator would be by one entry in ``cost/terms.py``); no other file
changes, and:

* the evaluator prices it (``evaluate`` / ``evaluate_many``: TPOT grows by exactly the toy's
  time in every layer, and ``op_time_s`` reports it under its name);
* the exact DP picks it up: its tables are built from the same ``OperatorTerms.layer``, its
  self-check (``verify``) passes, it still equals brute force, and its optimum moves away from
  the sequence split the toy penalises.

It reuses the existing per-operator choices (the ``attention`` choice here): a new choice head
in the action vector is a change of ``parallel/ops.py`` (``docs/design.md``, "Adding an
operator").
"""

from __future__ import annotations

import numpy as np
import pytest
from test_exact import check_exact_equals_brute_force, device

from learn_to_shard.cost import CostModel, terms
from learn_to_shard.cost.comm import GATHER_OR_SCATTER, collective_time_s
from learn_to_shard.hardware.spec import ClusterSpec
from learn_to_shard.model.spec import AttentionKind, AttentionSpec, LayerSpec, ModelSpec
from learn_to_shard.parallel import StrategySpace
from learn_to_shard.parallel.ops import Choice, Op
from learn_to_shard.parallel.strategy import Strategy
from learn_to_shard.search.exact import ExactSearcher
from learn_to_shard.search.exact_tables import verify
from learn_to_shard.workload import Phase, Workload

#: Width of the toy gate's activation, in multiples of ``hidden`` (large enough to matter).
GATE = 64
LAYERS = 3


def toy_gate(t: terms.OperatorTerms, env: dict, dims: np.ndarray, lin: np.ndarray,
             is_moe: bool, window: int | None, ctx: float) -> np.ndarray:
    """The toy operator's time per layer, seconds, ``[n]``: an all-gather of the step's
    ``rows · hidden · GATE`` 16-bit activations over TP when attention splits sequences."""
    seq_split = dims[:, Op.ATTENTION] == Choice.SHARD0
    full_bytes = env["rows"] * float(t.shapes.hidden * GATE) * 2.0
    kind = np.where(seq_split, GATHER_OR_SCATTER, 0)
    link = env["link_tp"]
    return collective_time_s(kind, env["tp"], full_bytes, link.bw, link.alpha)


def _problem() -> CostModel:
    m = ModelSpec(name="toy", architecture="Test", hidden_size=64, vocab_size=1000,
                  attention=AttentionSpec(AttentionKind.GQA, 4, 2, 16, 16),
                  dense_intermediate_size=128, gated_mlp=True, moe=None,
                  layers=tuple(LayerSpec(is_moe=False) for _ in range(LAYERS)))
    cl = ClusterSpec(device(8e10, 8), 4, name="t")
    sp = StrategySpace(m, cl, tp_values=(2, 4), ep_values=(1,), pp_values=(1,),
                       dp_values=(1,), batch_values=(8, 64))
    return CostModel(m, cl, Workload(Phase.DECODE, isl=200), space=sp)


@pytest.fixture
def with_toy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(terms.EXTRA_LAYER_TERMS, "toy_gate", toy_gate)


def test_shipped_model_registers_no_extra_term():
    assert terms.EXTRA_LAYER_TERMS == {}


def test_evaluator_prices_the_toy_operator(with_toy):
    cm = _problem()
    dims = (2, 2, int(Choice.SHARD0), 2, 2, 2, 2, 2, 2, 2, 2, 2)
    s = Strategy(tp=2, ep=1, pp=1, dp=1, batch=64, dims=dims)
    with_est = cm.evaluate(s)
    tp = np.array([2])
    env = cm.layer_env(tp, np.array([1]), np.array([1]), np.array([64.0]), np.array([0.0]))
    per_layer = float(toy_gate(cm, env, np.array([dims]), np.array([0]), False, None,
                               200.0)[0])
    assert per_layer > 0
    assert with_est.op_time_s["toy_gate"] == pytest.approx(LAYERS * per_layer, rel=1e-12)
    terms.EXTRA_LAYER_TERMS.pop("toy_gate")
    base = cm.evaluate(s)
    assert "toy_gate" not in base.op_time_s
    # pp = 1, one micro-batch: TPOT is the sum of the layer times plus the boundary terms.
    assert with_est.tpot_s - base.tpot_s == pytest.approx(LAYERS * per_layer, rel=1e-9)
    a = cm.space.encode(s)[None, :]
    terms.EXTRA_LAYER_TERMS["toy_gate"] = toy_gate
    assert float(cm.evaluate_many(a).tpot_s[0]) == with_est.tpot_s


def test_exact_dp_picks_up_the_toy_operator(with_toy):
    cm = _problem()
    assert verify(cm, n=64) > 0
    check_exact_equals_brute_force(cm, describe=False)
    with_toy_best = ExactSearcher().search(cm, None, 0).best_action
    terms.EXTRA_LAYER_TERMS.pop("toy_gate")
    without = ExactSearcher().search(cm, None, 0).best_action
    assert without is not None and with_toy_best is not None
    assert cm.space.decode(without).dims[Op.ATTENTION] == Choice.SHARD0
    assert cm.space.decode(with_toy_best).dims[Op.ATTENTION] != Choice.SHARD0

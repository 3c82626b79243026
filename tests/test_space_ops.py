"""Operators and the mesh as data: ``parallel/ops.py`` (``OPS``) and ``parallel/mesh.py``.

What the operator definitions say is checked against the facts they encode (Megatron-LM's
layout, DTensor's placement rules, the engines' blocks), and what is derived from them (layout
tables, validity rules, the exact solver's option sets) against the definitions.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from learn_to_shard.api import make_cost_model, make_workload
from learn_to_shard.engines import BLOCKS, MEGATRON
from learn_to_shard.hardware import parse_cluster
from learn_to_shard.model import load_model
from learn_to_shard.parallel import ops
from learn_to_shard.parallel.mesh import AXES, Mesh, worst_local_ranks
from learn_to_shard.parallel.ops import (
    LAYOUT_IN,
    LAYOUT_OUT,
    MEGATRON_DIMS,
    NUM_CHOICES,
    OPS,
    Choice,
    Op,
    block_ops,
    block_options,
)
from learn_to_shard.parallel.placement import Layout, redistribute
from learn_to_shard.parallel.space import (
    ACTION_LEN,
    NUM_COARSE,
    RULE_BIT,
    RULES,
    StrategySpace,
    active_heads,
)
from learn_to_shard.search import exact_tables


def test_one_definition_per_operator_in_action_order():
    assert [d.op for d in OPS] == list(Op)
    assert [d.name for d in OPS] == list(ops.OP_NAMES)
    for d in OPS:
        assert [c.choice for c in d.choices] == list(Choice)
        assert d.axis in ops.OP_AXES and d.axis in AXES


def test_megatron_dims_are_megatron_lm_s_layout():
    # Shoeybi et al. 2019: vocab-parallel embedding (rows of [V, H]), column-parallel
    # qkv / up, head-parallel attention, row-parallel o / down, replicated router,
    # vocab-parallel LM head (columns of [H, V]).
    s0, s1, rep = Choice.SHARD0, Choice.SHARD1, Choice.REPLICATE
    assert MEGATRON_DIMS == (s0, s1, s1, s0, s1, s0, rep, s1, s0, s1, s0, s1)
    for block, names in BLOCKS.items():
        assert tuple(MEGATRON_DIMS[ops.OP_NAMES.index(n)] for n in names) == MEGATRON[block]


def test_blocks_agree_with_the_engines():
    for block, names in BLOCKS.items():
        assert tuple(ops.OP_NAMES[o] for o in block_ops(block)) == names


def test_choice_and_layout_codes_are_separate_spaces():
    assert Choice.SHARD0 == 0 and Layout.R == 0       # equal ints, distinct named types
    assert not isinstance(Choice.SHARD0, Layout) and not isinstance(Layout.R, Choice)
    assert len(Layout) == 4 and NUM_CHOICES == len(Choice) == 3


@pytest.mark.parametrize("op", [o for o in Op if o not in (Op.EMBEDDING, Op.ATTENTION)])
def test_linear_layouts_follow_dtensor_rules(op):
    """Column: R in, S(1) out; row: S(1) in, P out; replicated: runs on the token split
    (R, S(0) kept; P -> S(0) by reduce-scatter; S(1) -> R by all-gather) and yields it."""
    for arriving in Layout:
        assert LAYOUT_IN[op, Choice.SHARD1, arriving] == Layout.R
        assert LAYOUT_IN[op, Choice.SHARD0, arriving] == Layout.S1
        assert LAYOUT_OUT[op, Choice.SHARD1, arriving] == Layout.S1
        assert LAYOUT_OUT[op, Choice.SHARD0, arriving] == Layout.P
        ran_on = int(LAYOUT_IN[op, Choice.REPLICATE, arriving])
        assert ran_on in (Layout.R, Layout.S0)
        assert LAYOUT_OUT[op, Choice.REPLICATE, ran_on] == ran_on
        if arriving in (Layout.R, Layout.S0):
            assert ran_on == arriving and redistribute(arriving, ran_on) is None
    assert str(redistribute(Layout.P, int(LAYOUT_IN[op, Choice.REPLICATE, Layout.P])).value) \
        == "reduce-scatter"
    assert str(redistribute(Layout.S1, int(LAYOUT_IN[op, Choice.REPLICATE, Layout.S1])).value) \
        == "all-gather"


def test_attention_and_embedding_layouts():
    att = LAYOUT_IN[Op.ATTENTION]
    assert (att[Choice.SHARD0] == Layout.S0).all() and (att[Choice.SHARD1] == Layout.S1).all()
    assert (att[Choice.REPLICATE] == Layout.R).all()
    assert (LAYOUT_OUT[Op.ATTENTION] == att).all()              # yields what it ran on
    assert exact_tables.EMB_LAYOUT.tolist() == [Layout.P, Layout.S1, Layout.R]


def test_every_need_names_a_rule_and_a_choice_dim():
    names = {n for n, _ in RULES}
    for d in OPS:
        for c in d.choices:
            assert {n.rule for n in c.needs} <= names
        assert not d.choices[Choice.REPLICATE].needs        # replicated never breaks a rule


def test_weight_shapes_from_the_model():
    m = load_model("llama-3.1-70b")
    h, v, i = m.hidden_size, m.vocab_size, m.dense_intermediate_size
    shapes = {d.op: d.weight_shape(m) for d in OPS}
    assert shapes[Op.EMBEDDING] == (v, h) and shapes[Op.LM_HEAD] == (h, v)
    assert shapes[Op.QKV_PROJ] == (h, 64 * 128 + 8 * 256)        # 64 q heads, 8 KV heads
    assert shapes[Op.O_PROJ] == (64 * 128, h) and shapes[Op.ATTENTION] is None
    assert shapes[Op.DENSE_UP] == (h, 2 * i) and shapes[Op.DENSE_DOWN] == (i, h)
    assert shapes[Op.ROUTER] is None                             # dense model


def test_presence_drives_active_heads_and_blocks():
    cl = parse_cluster("h100-sxm:8")
    for name, absent in (("llama-3.1-8b", {"router", "experts", "shared"}),
                         ("qwen3-30b-a3b", {"dense", "shared"}),
                         ("deepseek-v3", set())):
        sp = StrategySpace.build(load_model(name), cl)
        act = active_heads(sp)[NUM_COARSE:]
        for d in OPS:
            assert act[d.op] == (d.block not in absent), (name, d.name)
        assert {b for b in BLOCKS if not sp.block_present(b)} == absent


def test_a_need_added_to_one_choice_reaches_the_rules(monkeypatch):
    """The validity rules read the definitions: a requirement added to o_proj's Shard(1)
    (hidden split) in ``OPS`` is enforced by ``rule_bits_many`` with no other change."""
    m = load_model("llama-3.1-8b")
    sp = StrategySpace.build(m, parse_cluster("h100-sxm:8"))
    a = sp.encode(dataclasses.replace(sp.decode(np.zeros(ACTION_LEN, dtype=np.int64)), tp=8,
                                      dims=(2,) * 3 + (1,) + (2,) * 8))
    assert sp.rule_bits_many(a[None])[0] & RULE_BIT["ffn"] == 0
    o = OPS[Op.O_PROJ]
    odd = ops.Need("ffn", lambda m, q: 12)                    # 12 is not divisible by tp 8
    col = dataclasses.replace(o.choices[Choice.SHARD1],
                              needs=o.choices[Choice.SHARD1].needs + (odd,))
    patched = dataclasses.replace(o, choices=(o.choices[0], col, o.choices[2]))
    new_ops = OPS[:Op.O_PROJ] + (patched,) + OPS[Op.O_PROJ + 1:]
    monkeypatch.setattr("learn_to_shard.parallel.space.present_ops",
                        lambda model: tuple(d for d in new_ops if d.present(model)))
    sp = StrategySpace.build(m, parse_cluster("h100-sxm:8"))     # rules are read per space
    assert sp.rule_bits_many(a[None])[0] & RULE_BIT["ffn"]


def test_solver_option_sets_are_derived():
    assert exact_tables.N_HUB == NUM_CHOICES ** 3 and exact_tables.N_AO == NUM_CHOICES ** 2
    assert block_options(block_ops("attention")).shape == (exact_tables.N_HUB, 3)
    dims = np.random.default_rng(0).integers(0, NUM_CHOICES, size=(50, 12))
    st = exact_tables.Structure.of(make_cost_model("deepseek-v2-lite", "h100-sxm:8",
                                                make_workload(context=1024)))
    ix = exact_tables.part_indices(st, dims)
    hub_cols = [Op.QKV_PROJ, Op.ATTENTION, Op.O_PROJ]
    assert (exact_tables.HUB[ix["hub"]] == dims[:, hub_cols]).all()
    assert (st.d_opts[ix["dense"]] == dims[:, [Op.DENSE_UP, Op.DENSE_DOWN]]).all()
    group_cols = [Op.EXPERT_UP, Op.EXPERT_DOWN, Op.SHARED_EXPERT_UP, Op.SHARED_EXPERT_DOWN]
    assert (st.g_opts[ix["group"]] == dims[:, group_cols]).all()
    assert (st.r_opts[ix["router"]] == dims[:, Op.ROUTER]).all()


# ---------------------------------------------------------------------------------- mesh
def test_rank_order_tp_innermost_then_dp_then_pp():
    tp, dp, pp = 2, 3, 2
    ranks = [Mesh.rank(p, d, t, dp, tp) for p in range(pp) for d in range(dp)
             for t in range(tp)]
    assert ranks == list(range(pp * dp * tp))
    assert Mesh.rank(1, 0, 0, dp, tp) == dp * tp                 # stage 1 starts after g


def test_group_extents_per_axis():
    ax = Mesh.axes(np.array([4, 8, 2]), np.array([8, 1, 16]), np.array([2, 1, 1]),
                   np.array([2, 1, 8]))
    assert ax.stage.tolist() == [8, 8, 16] and ax.devices.tolist() == [16, 8, 16]
    assert ax.extent("etp").tolist() == [1, 8, 1] and ax.extent("cp").tolist() == [1, 1, 1]
    with pytest.raises(ValueError, match="unknown mesh axis 'sp'"):
        ax.extent("sp")


def test_node_straddling_and_stage_hops():
    mesh = Mesh(num_devices=24, devices_per_node=8)
    # TP6 groups: ranks 6-11 straddle nodes 0/1; TP4 and TP8 groups never do; TP16 spans two.
    assert mesh.in_node(np.array([1, 4, 6, 8, 16])).tolist() == [True, True, False, True, False]
    assert worst_local_ranks(6, 8, 24) == 2 and mesh.local_ranks(np.array([6]))[0] == 2
    # TP4 PP4 (stage = 4 ranks) on 8-rank nodes: hops 0->1 and 2->3 inside, 1->2 crosses.
    assert mesh.hop_crossings(np.array([4, 8, 4]), np.array([4, 3, 1])).tolist() == [1, 2, 0]
    one_node = Mesh(num_devices=8, devices_per_node=8)
    assert one_node.hop_crossings(np.array([2]), np.array([4])).tolist() == [0]

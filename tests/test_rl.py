"""The RL searcher: environment contract, policy shape, budget, restarts, optimum, determinism."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from conftest import tiny_dense, tiny_moe

from learn_to_shard.cost.config import CostModelConfig
from learn_to_shard.cost.model import BatchEstimate, CostModel
from learn_to_shard.errors import ConfigError
from learn_to_shard.hardware import parse_cluster
from learn_to_shard.parallel.space import StrategySpace, active_heads, canonical
from learn_to_shard.search import get_searcher
from learn_to_shard.search.base import BudgetedEvaluator
from learn_to_shard.search.rl import RewardConfig, RLConfig, RLSearcher
from learn_to_shard.search.rl.env import EMPTY_SLOT, EliteBuffer, ShardingEnv
from learn_to_shard.search.rl.searcher import agent_seed, cosine_schedule
from learn_to_shard.workload import Phase, Workload


def _cm(devices: int = 8) -> CostModel:
    return CostModel(tiny_moe(), parse_cluster(f"h100-sxm:{devices}"),
                     Workload(Phase.DECODE, isl=2048))


def _env(cm: CostModel | None = None, budget: int | None = None) -> ShardingEnv:
    cm = cm or _cm()
    ev = BudgetedEvaluator(cm, budget)
    rng = np.random.default_rng(0)
    acts = cm.space.sample(rng, 64)
    est = cm.evaluate_many(acts)
    elite = EliteBuffer(3)
    for j in np.flatnonzero(est.feasible):
        elite.offer(acts[j], float(est.objective[j]))
    return ShardingEnv(ev, float(est.objective.max()), elite=elite)


def small_problem() -> CostModel:
    """A 24-layer, 8192-wide dense model on 8 H100s, decode at 4k, over a restricted space:
    tp ∈ {2, 4, 8}, batch 256, and the 7 per-operator heads a dense model has — 6,561
    canonical strategies, of which only two reach the optimum (the per-operator dims matter:
    the model needs tp ≥ 2). With 1000 evaluations, uniform random search finds one in about
    1 run of 4 (1 − (1 − 2/6561)^1000 ≈ 26 %)."""
    m = tiny_dense(layers=24, hidden=8192, ffn=28672, heads=64, kv=8, vocab=128256)
    cl = parse_cluster("h100-sxm:8")
    sp = StrategySpace(m, cl, (2, 4, 8), (1,), (1,), (1,), (256,))
    # A step budget of the batch: the decode workspace the engine reserves is the batch's
    # (an 8,192-token one made half the strategies near the optimum infeasible, 118 -> 60).
    return CostModel(m, cl, Workload(Phase.DECODE, isl=4096),
                     config=CostModelConfig(max_num_batched_tokens=256), space=sp)


def enumerate_optimum(cm: CostModel) -> tuple[float, int]:
    """Best objective over every canonical strategy, and how many strategies reach it."""
    act = active_heads(cm.space)
    nvec = np.where(act, cm.space.nvec, 1)
    grid = canonical(np.array(list(itertools.product(*[range(n) for n in nvec]))), act)
    obj = cm.evaluate_many(grid).objective
    best = float(obj.max())
    return best, int((obj >= best * (1 - 1e-12)).sum())


# ------------------------------------------------------------------ environment
def test_gymnasium_check_env():
    from gymnasium.utils.env_checker import check_env

    check_env(_env(), skip_render_check=True)


# SB3 suggests flattening [T, A] observations or a custom policy; the policy is custom.
@pytest.mark.filterwarnings("ignore:Your observation")
def test_sb3_check_env():
    from stable_baselines3.common.env_checker import check_env

    check_env(_env(), warn=True)


def test_env_episode_semantics():
    env = _env()
    obs0, _ = env.reset(seed=1)
    assert obs0.shape == (3, len(env.nvec)) and obs0.dtype == np.float32
    assert env.observation_space.contains(obs0)
    best0 = env.best_x
    # Find a strategy better than the best elite: the maximum of a large sample.
    cm = env.evaluator.cost_model
    acts = canonical(cm.space.sample(np.random.default_rng(5), 3000), env.active)
    est = cm.evaluate_many(acts)
    top = acts[int(np.argmax(est.objective))]
    obs, r, term, trunc, info = env.step(top)
    assert term and not trunc and info["feasible"]
    assert env.best_x > best0
    cfg = env.reward_cfg
    assert r == pytest.approx(cfg.alpha * info["x"] + cfg.beta * (info["x"] - best0))
    # The elite history now leads with it, and reset() without a seed keeps it.
    assert np.array_equal(env.elite.entries[0][0], top)
    obs1, _ = env.reset()
    np.testing.assert_array_equal(obs, obs1)
    # reset(seed=...) restores the initial search state.
    obs2, _ = env.reset(seed=1)
    np.testing.assert_array_equal(obs2, obs0)
    assert env.best_x == best0


def test_invalid_reward_below_every_valid_reward():
    cfg = RewardConfig()
    for best in (0.0, 1.0, 5.0):
        worst_valid = cfg.reward(0.0, True, best)
        assert cfg.reward(123.0, False, best) < worst_valid
        assert cfg.reward(0.5, True, best) < cfg.reward(2.0, True, best)


def test_env_counts_every_evaluation_and_stops_at_budget():
    env = _env(budget=3)
    env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(3):                  # valid or not, each step is one evaluation
        env.step(env.action_space.sample())
    assert env.evaluator.evaluations == 3
    with pytest.raises(RuntimeError):
        env.step(env.action_space.sample())


def test_inactive_heads_are_pinned():
    env = _env()
    act = env.active
    assert (env.action_space.nvec[~act] == 1).all()
    assert (env.action_space.nvec[act] == env.nvec[act]).all()
    assert env.action_masks().shape == (int(env.action_space.nvec.sum()),)


def test_elite_buffer():
    eb = EliteBuffer(3)
    nvec = np.array([4, 3])
    assert (eb.matrix(nvec) == EMPTY_SLOT).all()
    assert eb.offer(np.array([1, 1]), 10.0)
    assert not eb.offer(np.array([1, 1]), 10.0)          # duplicate
    assert eb.offer(np.array([2, 0]), 30.0)
    assert eb.offer(np.array([3, 2]), 20.0)
    assert not eb.offer(np.array([0, 0]), 5.0)           # worse than the worst, full
    assert eb.offer(np.array([0, 2]), 25.0)
    assert [o for _, o in eb.entries] == [30.0, 25.0, 20.0]
    m = eb.matrix(nvec)
    np.testing.assert_allclose(m[0], [2 / 3, 0.0])
    np.testing.assert_allclose(m[1], [0.0, 1.0])


# ------------------------------------------------------------------ policy
def test_policy_features_shape_and_heads():
    import torch
    from gymnasium import spaces

    from learn_to_shard.search.rl.policy import EliteAttentionExtractor

    box = spaces.Box(-1.0, 1.0, shape=(3, 17), dtype=np.float32)
    ext = EliteAttentionExtractor(box, features_dim=256)
    out = ext(torch.zeros(5, 3, 17))
    assert out.shape == (5, 256)
    # Mean pooling without positional encoding: the order of the records does not matter.
    x = torch.rand(2, 3, 17)
    torch.testing.assert_close(ext(x), ext(x[:, [2, 0, 1]]), rtol=1e-5, atol=1e-5)


def test_cosine_schedule_and_agent_seed():
    s = cosine_schedule(1e-3, 0.0)
    assert s(1.0) == pytest.approx(1e-3)
    assert s(0.5) == pytest.approx(5e-4)
    assert s(0.0) == pytest.approx(0.0, abs=1e-15)
    assert agent_seed(0, 0) != agent_seed(0, 1) != agent_seed(1, 0)
    assert agent_seed(3, 2) == agent_seed(3, 2)


# ------------------------------------------------------------------ searcher
def test_registered_and_needs_budget():
    assert isinstance(get_searcher("rl"), RLSearcher)
    with pytest.raises(ConfigError, match="--budget"):
        RLSearcher().search(_cm(), None, 0)


def test_budget_exact_and_restarts():
    cm = _cm()
    r = RLSearcher().search(cm, 60, seed=0)
    assert r.evaluations == 60 and len(r.curve) == 60
    assert r.best_action is not None and r.best_objective > 0
    log = r.notes["agent_log"]
    assert sum(a["evaluations"] for a in log) + r.notes["init_samples"] == 60
    assert r.notes["agents"] >= 5          # one per chunk at least
    # tau = 0: every agent is "confident" after its first rollout and restarts.
    quick = RLSearcher(RLConfig(tau=0.0)).search(cm, 40, seed=0)
    assert quick.evaluations == 40
    assert all(a["early_exit"] for a in quick.notes["agent_log"][:-1])
    assert all(a["evaluations"] == 2 for a in quick.notes["agent_log"][:-1])


def test_search_writes_nothing_to_the_temporary_directory(tmp_path, monkeypatch):
    """SB3's default logger makes an empty ``SB3-<date>`` folder in the temporary directory
    on every ``learn()``; the searcher's silent logger makes none (each agent of each run
    left one before)."""
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    r = RLSearcher().search(_cm(), 40, seed=0)
    assert r.notes["agents"] >= 2
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("SB3-")]


def test_seed_reproduces_exactly():
    cm = _cm()
    a = RLSearcher().search(cm, 80, seed=11)
    b = RLSearcher().search(cm, 80, seed=11)
    c = RLSearcher().search(cm, 80, seed=12)
    np.testing.assert_array_equal(a.curve, b.curve)
    np.testing.assert_array_equal(a.best_action, b.best_action)
    assert a.best_objective == b.best_objective
    assert a.notes == b.notes
    assert [t[1] for t in a.top] == [t[1] for t in b.top]
    assert not (np.array_equal(a.curve, c.curve) and np.array_equal(a.best_action,
                                                                    c.best_action))


def test_torch_state_restored():
    import torch

    threads = torch.get_num_threads()
    RLSearcher().search(_cm(), 10, seed=0)
    assert torch.get_num_threads() == threads


class SeparatedProblem(CostModel):
    """A landscape with one optimum standing clearly apart, over a real strategy space.

    The ten per-operator heads a tiny MoE model with a shared expert has (embedding, qkv_proj,
    attention, o_proj, router, expert_up/down, shared_expert_up/down, lm_head; the degrees are
    fixed) span 3**10 = 59,049 canonical strategies. Every strategy is feasible and scores
    ``1000 · 0.9**wrong``, ``wrong`` = heads that differ from a fixed target: the runner-up is
    10% below the optimum, and each further wrong head costs another 10%. Uniform random search
    with 300 evaluations ends two or three heads away (it reaches at most one wrong head with
    probability 1 − (1 − 21/59,049)**300 ≈ 10%). The estimate's other fields are the real cost
    model's (so the searcher's bookkeeping is exercised as usual).
    """

    def __init__(self, target_seed: int = 123) -> None:
        m = tiny_moe(shared=1)
        cl = parse_cluster("h100-sxm:8")
        space = StrategySpace(m, cl, (4,), (2,), (1,), (1,), (64,))
        super().__init__(m, cl, Workload(Phase.DECODE, isl=2048), space=space)
        self.active = active_heads(space)
        self.target = np.zeros(len(space.nvec), dtype=np.int64)
        rng = np.random.default_rng(target_seed)
        self.target[self.active] = rng.integers(0, space.nvec[self.active])

    def wrong_heads(self, actions: np.ndarray) -> np.ndarray:
        """``[n]`` heads of ``actions`` (``[n, A]``) that differ from the target."""
        a = np.atleast_2d(actions)
        return ((a != self.target) & self.active).sum(axis=1)

    def evaluate_many(self, actions: np.ndarray) -> BatchEstimate:
        est = super().evaluate_many(actions)
        obj = 1000.0 * 0.9 ** self.wrong_heads(actions)
        n = len(obj)
        return dataclasses.replace(est, feasible=np.ones(n, dtype=bool), objective=obj,
                                   tokens_per_s_per_device=obj,
                                   violation_bits=np.zeros(n, dtype=np.int64))


def _wrong(cm: SeparatedProblem, best_objective: float) -> int:
    return round(float(np.log(best_objective / 1000.0) / np.log(0.9)))


def test_separated_problem_landscape():
    cm = SeparatedProblem()
    assert int(cm.active.sum()) == 10
    assert cm.evaluate_many(cm.target[None, :]).objective[0] == 1000.0
    other = cm.target.copy()
    j = int(np.flatnonzero(cm.active)[0])
    other[j] = (other[j] + 1) % cm.space.nvec[j]
    assert cm.evaluate_many(other[None, :]).objective[0] == pytest.approx(900.0)


def test_learns_separated_optimum_better_than_random():
    """RL learns: on a landscape whose optimum stands 10% above the runner-up, its best after
    300 evaluations is closer to the optimum than random search's, averaged over 5 seeds.

    Margin, from 16 seeds of each measured on one machine (native AVX-512 kernels): RL ended
    1.25 heads away on average (0: 1 run, 1: 10, 2: 5; variance 0.31), random search 2.38
    (1: 1, 2: 8, 3: 7; variance 0.36). The difference of two 5-seed means is then 1.13 ± 0.37
    (one standard deviation), so the assertion fails by chance with probability about 0.001
    on a machine whose float path gives RL other trajectories; it would fail by design if RL
    learned nothing (its mean would match random's).
    """
    cm = SeparatedProblem()
    seeds = range(5)
    rl = [_wrong(cm, RLSearcher().search(cm, 300, seed=s).best_objective) for s in seeds]
    rnd = [_wrong(cm, get_searcher("random").search(cm, 300, s).best_objective) for s in seeds]
    assert np.mean(rl) < np.mean(rnd), (rl, rnd)


def test_reaches_near_optimum_of_a_real_small_problem():
    """A smoke test on the real cost model: 6,561 strategies, 118 within 1% of the optimum;
    RL's best after 400 evaluations is within 1% (random search misses that set with
    probability (1 − 118/6561)**400 ≈ 7e-4 per run, so this checks the plumbing — the search
    returns the best strategy it met — rather than learning)."""
    cm = small_problem()
    best, _ = enumerate_optimum(cm)
    r = RLSearcher().search(cm, 400, seed=0)
    assert r.evaluations == 400
    assert best * 0.99 <= r.best_objective <= best * (1 + 1e-12)


@pytest.mark.slow
def test_finds_separated_optimum_across_many_seeds():
    """The learning claim with a wider margin: 16 seeds at 1000 evaluations on the separated
    landscape. RL reaches the optimum itself in at least 12 (measured on one machine, native
    AVX-512 kernels: 16 of 16; even at a true rate of 0.9, P(fewer than 12 of 16) ≈ 0.017) and
    random search (rate 1 − (1 − 1/59,049)**1000 ≈ 1.7%; measured 0 of 16, its best one to
    three heads away) in at most 2."""
    cm = SeparatedProblem()
    rl = sum(RLSearcher().search(cm, 1000, s).best_objective >= 1000.0 for s in range(16))
    rnd = sum(get_searcher("random").search(cm, 1000, s).best_objective >= 1000.0
              for s in range(16))
    assert rl >= 12 and rnd <= 2, (rl, rnd)


def test_padded_multicategorical_equals_sb3():
    """Same log-probabilities, entropies, modes and gradients as SB3's per-head version."""
    import torch
    from stable_baselines3.common.distributions import MultiCategoricalDistribution

    from learn_to_shard.search.rl.policy import PaddedMultiCategorical, head_probabilities

    torch.manual_seed(0)
    dims = [12, 5, 12, 29, 17, 3, 3, 1, 1]
    ref, fast = MultiCategoricalDistribution(dims), PaddedMultiCategorical(dims)
    logits = torch.randn(4, sum(dims), requires_grad=True)
    d_ref, d_fast = ref.proba_distribution(logits), fast.proba_distribution(logits)
    acts = d_ref.sample()
    torch.testing.assert_close(d_fast.log_prob(acts), d_ref.log_prob(acts))
    torch.testing.assert_close(d_fast.entropy(), d_ref.entropy())
    assert torch.equal(d_fast.mode(), d_ref.mode())
    g_ref = torch.autograd.grad((d_ref.log_prob(acts) + d_ref.entropy()).sum(), logits)[0]
    g_fast = torch.autograd.grad((d_fast.log_prob(acts) + d_fast.entropy()).sum(), logits)[0]
    torch.testing.assert_close(g_fast, g_ref)
    s = d_fast.sample()
    assert s.shape == (4, len(dims)) and bool((s < torch.tensor(dims)).all())
    for p_fast, p_ref in zip(head_probabilities(d_fast), head_probabilities(d_ref), strict=True):
        torch.testing.assert_close(p_fast, p_ref)

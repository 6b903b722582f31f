"""The noise source: unpredictable by default, replayable only on request (mixdp_core.randomness)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mixdp_core.errors import ConfigError
from mixdp_core.methods import make_method
from mixdp_core.methods._private_count import resolve_private_count
from mixdp_core.randomness import NOISE_SOURCES, REPRODUCIBLE_WARNING, label, noise_rng, snap_count, snap_release


def test_secure_generator_differs_on_every_call_with_the_same_seed():
    a = noise_rng("secure", 0, 0xC0).standard_normal(64)
    b = noise_rng("secure", 0, 0xC0).standard_normal(64)
    assert not np.array_equal(a, b)
    # and it is not the seeded stream an adversary would replay
    assert not np.array_equal(a, np.random.default_rng([0, 0xC0]).standard_normal(64))
    # a plausible N(0, 1) sample (catches a broken bit generator, e.g. constant output)
    big = noise_rng("secure", 0, 1).standard_normal(200_000)
    assert abs(big.mean()) < 0.01 and abs(big.std() - 1.0) < 0.01


def test_secure_generator_is_chacha20_keyed_from_the_os():
    g = noise_rng("secure", 0, 1)
    bg = g.bit_generator
    assert type(bg).__name__ == "ChaCha"
    assert bg.state["state"]["rounds"] == 20


def test_reproducible_generator_replays_the_seed():
    a = noise_rng("reproducible", 3, 7).standard_normal(16)
    np.testing.assert_array_equal(a, noise_rng("reproducible", 3, 7).standard_normal(16))
    np.testing.assert_array_equal(a, np.random.default_rng([3, 7]).standard_normal(16))
    assert not np.array_equal(a, noise_rng("reproducible", 3, 8).standard_normal(16))


def test_unknown_source_names_the_field_and_the_choices():
    with pytest.raises(ConfigError) as e:
        noise_rng("pcg", 0, 0)
    assert e.value.field == "noise" and "secure" in str(e.value) and "reproducible" in str(e.value)
    with pytest.raises(ConfigError) as e:
        make_method("adamix", noise="pcg")
    assert e.value.field == "noise"
    assert NOISE_SOURCES == ("secure", "reproducible")


def test_labels():
    assert label("reproducible") == REPRODUCIBLE_WARNING and "NOT private" in label("reproducible")
    assert "NOT" not in label("secure")


def test_snap_count_rounds_to_the_integer_grid():
    assert snap_count(1179.3599) == 1179.0 and snap_count(-0.6) == -1.0
    assert float(snap_count(12.5)).is_integer()


def test_snap_release_grid_is_a_power_of_two_at_most_a_quarter_of_the_noise_std():
    # std >= 4: the integers, as snap_count
    assert snap_release(54.577937, 20.0) == 55.0 and snap_release(-3.4, 4.0) == -3.0
    # std 1.3: grid 0.25 (the largest power of two <= 1.3 / 4 = 0.325)
    assert snap_release(7.0565, 1.3) == 7.0 and snap_release(7.13, 1.3) == 7.25
    # std 0.05: grid 1/128 (<= 0.0125)
    v = snap_release(0.123456, 0.05)
    assert v * 128 == round(v * 128) and abs(v - 0.123456) <= 1 / 256
    # arrays are snapped elementwise; the exact count's floating-point support is gone:
    # x + noise for two counts differing by one lands on the same grid
    arr = snap_release(np.array([1.49, 2.51, -0.2]), 10.0)
    assert arr.tolist() == [1.0, 3.0, -0.0]
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            snap_release(1.0, bad)


def test_every_released_noisy_scalar_of_a_guarded_run_is_on_its_grid():
    """The guard's and the checkpoint test's noisy gains as the run records them are snapped
    (std 20 / sqrt(m) >= 4 here: integers), whatever the noise source."""
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features import get_features

    sp = make_split(get_features("digits", "pixels"), SplitSpec(public_per_class=5, seed=0))
    m = make_method("adamix", target_epsilon=3.0).fit(sp)
    seen = [v for h in m.history_ for k, v in h.extra.items() if k.endswith("noisy_gain")]
    assert seen and all(float(v).is_integer() for v in seen)


@dataclasses.dataclass(frozen=True)
class _CountCfg:
    dataset_size: str = "noisy_count"
    size_bound: int | None = None
    count_budget_share: float = 0.01
    accountant: str = "pld"
    target_epsilon: float = 1.0
    target_delta: float = 1e-5
    noise: str = "secure"


def test_reproducible_noisy_count_gives_back_the_exact_count_and_secure_does_not():
    # the attack the issue reported: subtract the replayed noise from the released count
    n_exact = 1208
    cfg = _CountCfg(noise="reproducible")
    released, ev = resolve_private_count(cfg, n_exact, seed=0)
    rng = noise_rng("reproducible", 0, 0xC0)
    p = -np.expm1(-ev.epsilon)
    replayed_noise = int(rng.geometric(p)) - int(rng.geometric(p))
    assert released - replayed_noise == n_exact  # exact
    # secure: the same replay is off by the noise's own size, and two releases differ
    sec = _CountCfg()
    r1, ev1 = resolve_private_count(sec, n_exact, seed=0)
    guesses = [resolve_private_count(sec, n_exact, seed=0)[0] for _ in range(5)]
    assert len({r1, *guesses}) > 1
    assert float(r1).is_integer()


def test_replaying_a_secure_run_from_everything_it_publishes_gives_another_model():
    """The adversary of the issue: take the released run's whole config (seed included) and
    retrain on the same data. With the default source nothing matches; with the research
    option the replay is bit for bit."""
    from tests.methods.conftest import digits_featureset
    from mixdp_core.data.splits import SplitSpec, make_split

    split = make_split(digits_featureset(n_train=300), SplitSpec(public_per_class=3, seed=2))
    # guard off: a run whose guard keeps the (public, deterministic) start releases no noise to replay
    released = make_method("adamix", target_epsilon=2.0, seed=0, public_guard=False).fit(split)
    replay = make_method(**{"name": "adamix", **dataclasses.asdict(released.config)}).fit(split)
    assert not np.array_equal(replay.W_, released.W_)
    rel_r = make_method("adamix", target_epsilon=2.0, seed=0, noise="reproducible", public_guard=False).fit(split)
    rep_r = make_method(**{"name": "adamix", **dataclasses.asdict(rel_r.config)}).fit(split)
    np.testing.assert_array_equal(rep_r.W_, rel_r.W_)

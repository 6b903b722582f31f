"""Where every private release draws its noise.

A DP guarantee is a statement about the *distribution* of the released value; it holds only
if the adversary cannot predict the noise. A generator seeded with a published seed can be
replayed: the noisy count gives back the exact count and the released weights give back
membership, whatever the arithmetic of the accountant says. So:

* ``"secure"`` (default): a fresh ``np.random.Generator`` over **ChaCha20** (``randomgen``,
  20 rounds — the stream cipher the Linux kernel's CSPRNG uses), keyed with 256 bits from the
  operating system (:mod:`secrets`) at every call. The key is never stored, logged or
  returned, so nothing the product writes lets anyone recompute a draw; the same seed twice
  gives different released values. Data splits stay reproducible from the run's seed: they
  use the seed, never this module.
* ``"reproducible"``: numpy's PCG64 seeded with ``[seed, stream]`` (the behaviour of earlier
  versions), for research that must replay a run bit for bit. **Not private against anyone
  who knows the seed** — the report, the UI and every export say so
  (:data:`REPRODUCIBLE_WARNING`), and ``mixdp audit --attack seed-replay`` raises its alarm
  on such runs.

Floating-point attacks (Mironov 2012): the support of ``x + noise`` computed in doubles
depends on ``x``, which can reveal ``x`` from one output. What the product does about it:
integer-valued releases (noisy counts) are snapped to the integer grid
(:func:`snap_count`), a grid far coarser than the doubles' spacing, so the output's support
no longer depends on the exact count (Mironov's snapping, with rounding to integers); every
other noisy scalar a method releases or decides on (paired gains of the guard and the
checkpoint test, weighted gains, selection scores, a noisy fraction) is snapped the same way
to a power-of-two grid at most a quarter of its noise std (:func:`snap_release`); vector
releases (gradients) are never published step by step — only the final model after many
noisy steps and further arithmetic is — and their noise comes from full 53-bit (float64) or
24-bit (float32) uniforms of ChaCha20 through numpy's ziggurat. No formal proof covers the
float arithmetic of the vector releases; ``docs/privacy.md`` states this limit.
"""

from __future__ import annotations

import contextlib
import contextvars
import secrets
from typing import Any, Iterator

import numpy as np

from .errors import ConfigError

#: Values of every private config's ``noise`` field.
NOISE_SOURCES: tuple[str, ...] = ("secure", "reproducible")
SECURE, REPRODUCIBLE = NOISE_SOURCES

#: Label every report, page and export of a run with reproducible noise carries.
REPRODUCIBLE_WARNING = ("noise reproducible from the seed: NOT private against anyone who knows the seed "
                        "(research option)")
#: What the report says of the default source.
SECURE_LABEL = "secure: ChaCha20 keyed from the OS at every run; key never stored"


#: Set by :func:`tracking_noise`: a one-item list turned ``[True]`` when a release's generator
#: is made (:func:`noise_rng`), so a fit that fails can tell whether its mechanism had started.
_NOISE_TRACKER: contextvars.ContextVar = contextvars.ContextVar("noise_tracker", default=None)


@contextlib.contextmanager
def tracking_noise() -> Iterator[list]:
    """Within the block, ``marker[0]`` becomes ``True`` once any private release's generator is
    made (every mechanism draws its noise through :func:`noise_rng`): a failed fit whose
    marker is still ``False`` released nothing (a refusal from public values), one whose
    marker is ``True`` may have (the runs ledger charges it)."""
    marker = [False]
    token = _NOISE_TRACKER.set(marker)
    try:
        yield marker
    finally:
        _NOISE_TRACKER.reset(token)


def noise_rng(source: str, seed: int, stream: int) -> np.random.Generator:
    """The generator one private release draws from.

    Args:
        source: ``"secure"`` or ``"reproducible"`` (:data:`NOISE_SOURCES`).
        seed: the run's seed (used only by ``"reproducible"``).
        stream: a constant naming the release inside the method (keeps reproducible draws of
            different releases independent).

    Raises:
        ConfigError: ``source`` is not one of :data:`NOISE_SOURCES` (field ``noise``).
    """
    marker = _NOISE_TRACKER.get()
    if marker is not None:
        marker[0] = True
    if source == SECURE:
        import randomgen  # a numpy BitGenerator of a real stream cipher

        return np.random.Generator(randomgen.ChaCha(key=secrets.randbits(256), counter=0, rounds=20))
    if source == REPRODUCIBLE:
        return np.random.default_rng([int(seed), int(stream)])
    raise ConfigError("noise", f"must be one of {', '.join(NOISE_SOURCES)}, got {source!r}")


def noise_source_of(config: Any) -> str:
    """The ``noise`` field of a method config (``"secure"`` when it has none)."""
    return str(getattr(config, "noise", SECURE))


def snap_count(value: float) -> float:
    """Round a noisy count to the integer grid (post-processing: costs no privacy).

    The grid's spacing (1) is far coarser than the doubles' spacing near any count, so the
    support of the released value no longer depends on the exact count (Mironov 2012's
    floating-point attack reads the exact input off that support)."""
    return float(np.rint(value))


def snap_release(value: Any, noise_std: float) -> Any:
    """Snap a noisy scalar (or array of scalars) release to a grid of spacing ``2^k``, the
    largest power of two at most ``min(1, noise_std / 4)`` (post-processing: costs no privacy).

    Counts whose noise std is at least 4 land on the integers (:func:`snap_count`); a release
    with less noise (a scaled count, a score with std below one row) gets a finer power-of-two
    grid, still at most a quarter of its noise std (so the decision it feeds barely moves) and
    far coarser than the doubles' spacing (Mironov 2012, as :func:`snap_count`).

    Raises:
        ValueError: ``noise_std`` is not a finite number > 0.
    """
    import math

    sd = float(noise_std)
    if not (math.isfinite(sd) and sd > 0):
        raise ValueError(f"noise_std must be a finite number > 0, got {noise_std!r}")
    grid = 2.0 ** math.floor(math.log2(min(1.0, sd / 4.0)))
    out = np.rint(np.asarray(value, dtype=np.float64) / grid) * grid
    return float(out) if np.ndim(out) == 0 else out


def geometric_count(rng: np.random.Generator, count: int, epsilon: float) -> float:
    """``count + Z`` with Z two-sided geometric, ``P(Z = z) ∝ exp(-ε|z|)`` (Ghosh, Roughgarden
    & Sundararajan 2009): ε-DP for a count (L1 sensitivity 1 under add/remove-one).

    Integer-valued by construction (the difference of two geometric draws with success
    probability ``1 − e^{−ε}``), so no floating-point support leaks the exact count.
    """
    p = -np.expm1(-float(epsilon))
    return float(int(count) + int(rng.geometric(p)) - int(rng.geometric(p)))


def label(source: str) -> str:
    """One line saying where a run's noise came from (reports, pages, exports)."""
    return REPRODUCIBLE_WARNING if source == REPRODUCIBLE else SECURE_LABEL

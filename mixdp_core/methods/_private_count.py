"""How a DP-SGD method learns the number N of private rows that sets its sampling rate q and
its step count T (shared by the DP-SGD linear probes and sparse DP fine-tuning).

Under add/remove neighbours N is private. ``dataset_size`` says where N comes from:

* ``"noisy_count"`` (default): a two-sided geometric count ``N + Z`` (L1 sensitivity 1,
  add/remove; pure ε_c-DP with ε_c = ``count_budget_share`` · ε) released first
  (:func:`mixdp_core.accounting.noisy_count_event`); q and T are chosen from it and σ of the
  steps is calibrated to (ε − ε_c, δ) for whatever count came out. Basic composition holds
  for such an adaptive choice (:class:`mixdp_core.accounting.AdaptiveComposition`), so the
  reported ε = ε_c + ε_steps covers both.
* ``"public_bound"``: a public upper bound ``size_bound`` (no privacy cost).
* ``"public"``: the exact N, treated as public and said so in the report; under add/remove
  neighbours this costs privacy that is *not* accounted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..config import Interval, param
from ..errors import ConfigError
from ..randomness import geometric_count, noise_rng, noise_source_of

#: Values of ``dataset_size``.
DATASET_SIZES = ("noisy_count", "public_bound", "public")
#: Accountants of DP-SGD calibration and reports, tightest first.
DPSGD_ACCOUNTANT_CHOICES = ("pld", "rdp", "prv")


@dataclass(frozen=True, kw_only=True)
class PrivateCountConfig:
    """Config fields of the private count and the accountant (mixed into DP-SGD configs)."""

    dataset_size: str = param(
        "noisy_count", choices=DATASET_SIZES, leaks_private=True, leaks_when=("public",),
        privacy_note="'public' sets q and T from the exact number of private rows, which is private under "
                     "add/remove neighbours: that cost is not in the reported ε (the report says "
                     "'[N_private treated as public]').",
        help="How the private count N sets q and T: 'noisy_count' (default, a two-sided geometric count, pure "
             "ε_c = count_budget_share · ε, added to the steps' ε), 'public_bound' (uses size_bound) or 'public' (exact N treated as public and said so in "
             "the report: under add/remove neighbours this costs privacy that is not accounted).")
    size_bound: Optional[int] = param(None, type=int, range=Interval(1, 10**9), none_means="no bound",
                                      help="Public upper bound on the number of private samples; needed by "
                                           "dataset_size='public_bound'.")
    count_budget_share: float = param(0.02, type=float, range=Interval(0.0, 0.5, closed="right"),
                                      help="Share of ε spent on the noisy count (pure ε_c = share · ε, two-sided "
                                           "geometric noise of standard deviation √2/ε_c rows).")
    accountant: str = param("pld", choices=DPSGD_ACCOUNTANT_CHOICES,
                            help="Accountant for calibration and the reported ε: 'pld' (default, tightest), "
                                 "'rdp' or 'prv'.")


def check_bound(cfg: PrivateCountConfig) -> None:
    """``dataset_size="public_bound"`` needs ``size_bound``, and the numerical accountants
    (``pld``, ``prv``) need ``target_delta`` within their resolution (checked in preflight and
    in fit, before the count reads a private row: refused after it, the count was spent)."""
    from ..accounting.accountant import NUMERICAL_MIN_DELTA

    delta = getattr(cfg, "target_delta", None)
    if cfg.accountant in ("pld", "prv") and delta is not None and delta < NUMERICAL_MIN_DELTA:
        raise ConfigError("target_delta", f"the '{cfg.accountant}' accountant resolves δ >= {NUMERICAL_MIN_DELTA:g}, "
                                          f"got {delta:g}; use accountant='rdp' for a smaller δ")
    if cfg.dataset_size == "public_bound" and cfg.size_bound is None:
        raise ConfigError("size_bound", "dataset_size='public_bound' needs a public upper bound on the "
                                        "number of private samples (integer >= 1)")


def resolve_private_count(cfg: PrivateCountConfig, n_exact: int, *, seed: int) -> tuple[float, object]:
    """The N a DP-SGD method may use to set q and T, and the accounting event it costs.

    ``"noisy_count"``: releases ``N + Z``, Z two-sided geometric at ε_c
    (:func:`mixdp_core.randomness.geometric_count`: pure ε_c-DP, L1 sensitivity 1 under
    add/remove of one private row, integer-valued), noise from ``cfg.noise``
    (:func:`mixdp_core.randomness.noise_rng`), and returns its event
    (:func:`mixdp_core.accounting.noisy_count_event`). The caller chooses q and T from this
    released count and calibrates its steps to (ε − ε_c, δ) whatever the count came out as;
    basic composition, which holds for a mechanism chosen from an earlier output, gives
    (ε, δ) for the pair (:class:`mixdp_core.accounting.AdaptiveComposition`;
    ``docs/privacy.md``, "Adaptive choice").

    ``"public_bound"``: ``size_bound``, no event. ``"public"``: the
    exact N, no event (its cost is not accounted; the report says so).

    Returns:
        ``(n_used, count_event)``: ``n_used >= 1``; ``count_event`` is ``None`` unless the count
        was released.
    """
    from .. import accounting

    check_bound(cfg)
    event = None
    if cfg.dataset_size == "noisy_count":
        event = accounting.noisy_count_event(target_epsilon=cfg.target_epsilon, target_delta=cfg.target_delta,
                                             share=cfg.count_budget_share)
        rng = noise_rng(noise_source_of(cfg), seed, 0xC0)
        n_used = geometric_count(rng, n_exact, event.epsilon)
    elif cfg.dataset_size == "public_bound":
        n_used = float(cfg.size_bound)
    else:
        n_used = float(n_exact)
    return max(1.0, n_used), event

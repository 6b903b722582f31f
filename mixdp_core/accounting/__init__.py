r"""Privacy accounting: every ε the app shows comes from here.

This is the only module of MixDP Explorer that imports autodp, Opacus accountants or
dp-accounting. Neighbouring relation throughout: add/remove one sample.

Events (frozen dataclasses, validated on construction; see :mod:`.events`)::

    GaussianMechanism(noise_multiplier, sensitivity=1.0)    # μ = Δ/σ
    ComposedGaussian(noise_multiplier, steps)                # full-batch NoisyGD, μ = √T/σ
    PoissonSubsampledGaussian(noise_multiplier, sample_rate, steps)   # DP-SGD
    ExponentialMechanism(epsilon, monotone=False, count=1)   # ε-DP, ε²/8-zCDP per run
    ZCDP(rho), PureDP(epsilon)
    Composition(events)
    AdaptiveComposition(first, then)   # pure release that chooses the next mechanism
    PrivateSelection(base, eta, gamma) # best of K ~ TNB hidden repetitions (Papernot & Steinke)

Run ledger (:mod:`.run_ledger`): a method declares its plan, records each release where it
happens (:meth:`RunLedger.release`) and reports :meth:`RunLedger.report`; the runner calls
:meth:`RunLedger.check`, which raises :class:`PlanExceededError` if the run released more.

    event_to_dict(event) -> dict; event_from_dict(d) -> event   # exact JSON round trip

Queries: :func:`epsilon`, :func:`delta`, :func:`gdp_mu`, :func:`zcdp_rho`,
:func:`pure_epsilon`, :func:`privacy_report` → :class:`PrivacyReport` (which carries the
event as a dict, ``report.event``, so that runs can later be composed per data set).

Calibration (:mod:`.calibration`; no module outside ``accounting`` calibrates):
:func:`calibrate_steps`, :func:`calibrate_noise` (exact closed form, sub-millisecond),
:func:`calibrate_dpsgd_noise` (RDP / PRV / PLD), :func:`calibrate_em_epsilon` (exponential
mechanism) and :func:`largest_param` (the largest parameter of any monotone event family
within budget, e.g. ρ of CoinPress / DP-LS). All share one safe-side solver: none ever
overshoots the target; an impossible budget raises :class:`BudgetError`.

Accountants (:mod:`.accountant`): one :class:`Accountant` class per name in
:data:`ACCOUNTANT_REGISTRY` (``gdp``, ``zcdp``, ``rdp``, ``pure``, ``prv``, ``pld``).

Formulas (:mod:`.gaussian`, :mod:`.conversions`):

* μ-GDP ↔ (ε, δ): δ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ) (Balle & Wang 2018, Thm. 8;
  Dong, Roth & Su 2019, Cor. 2.13) — :func:`gaussian_delta`, :func:`gaussian_epsilon`.
* ρ-zCDP → (ε, δ): tight (Canonne, Kamath & Steinke 2020, Cor. 13) and simple
  ρ + 2√(ρ log 1/δ) (Bun & Steinke 2016, Prop. 1.3) — :func:`zcdp_to_epsilon`.
* pure ε → ρ: ε²/2 for any ε-DP mechanism (Bun & Steinke 2016, Prop. 1.4; the DP-prototypes
  paper's comparison convention) or ε²/8 for the exponential mechanism (bounded range;
  Cesar & Rogers 2021) — :func:`pure_to_zcdp`. ``zcdp_rho`` uses ε²/2 for :class:`PureDP`
  and ε²/8 for :class:`ExponentialMechanism`.
* Per-instance DP (Wang 2019; AdaMix Prop. 14): μ_i = √(Σ_t r_{i,t}²)/σ — :func:`pdp_epsilon`.
* Curves: :func:`privacy_curve`, :func:`privacy_curve_points` (memory independent of T),
  :func:`dpsgd_privacy_curve`, :func:`dpsgd_epsilon`.
* Work ceiling: :func:`step_limit` (``$MIXDP_MAX_STEPS``, default 100,000) — a budget
  implying more steps is refused by calibration, before anything runs.
* Curves: :func:`privacy_curve`, :func:`dpsgd_privacy_curve`.
* Private hyper-parameter selection with random stopping (Papernot & Steinke 2022, Thm. 2):
  :func:`selection_rdp`, :func:`selection_epsilon`, :func:`calibrate_selection_mu`,
  :func:`selection_steps`, :func:`sample_tnb` (:mod:`.selection`).
"""

from .accountant import (
    ACCOUNTANT_REGISTRY,
    ACCOUNTANTS,
    Accountant,
    PrivacyReport,
    delta,
    epsilon,
    epsilon_and_accountant,
    gdp_mu,
    privacy_report,
    pure_epsilon,
    zcdp_rho,
)
from .calibration import (
    DEFAULT_STEP_LIMIT,
    MAX_STEPS,
    calibrate_dpsgd_noise,
    calibrate_em_epsilon,
    calibrate_noise,
    calibrate_steps,
    check_steps,
    largest_param,
    noisy_count_event,
    step_limit,
)
from .conversions import (
    RDP_ORDERS,
    pure_dp_delta,
    pure_dp_epsilon,
    pure_to_zcdp,
    rdp_to_delta,
    rdp_to_epsilon,
    zcdp_to_delta,
    zcdp_to_epsilon,
)
from .curves import dpsgd_epsilon, dpsgd_privacy_curve, privacy_curve, privacy_curve_points
from .errors import AccountingError, BudgetError
from .events import (
    ZCDP,
    AdaptiveComposition,
    ComposedGaussian,
    Composition,
    ExponentialMechanism,
    GaussianMechanism,
    PoissonSubsampledGaussian,
    PrivateSelection,
    PureDP,
    event_from_dict,
    event_to_dict,
    split_adaptive,
)
from .run_ledger import PlanExceededError, Release, RunLedger
from .gaussian import gaussian_delta, gaussian_epsilon, gaussian_log_delta, gdp_mu_for_budget
from .pdp import pdp_epsilon, pdp_ratio_sq
from .tradeoff import approx_dp_max_tpr, gdp_max_tpr, max_tpr, tradeoff_sentence
from .selection import (
    calibrate_selection_mu,
    sample_tnb,
    selection_epsilon,
    selection_plan,
    selection_rdp,
    selection_steps,
    tnb_expected_count,
    tnb_pmf,
)

__all__ = [
    "approx_dp_max_tpr", "gdp_max_tpr", "max_tpr", "tradeoff_sentence",
    "ACCOUNTANTS",
    "ACCOUNTANT_REGISTRY",
    "Accountant",
    "AccountingError",
    "BudgetError",
    "AdaptiveComposition",
    "split_adaptive",
    "PrivateSelection",
    "RunLedger",
    "Release",
    "PlanExceededError",
    "ComposedGaussian",
    "Composition",
    "ExponentialMechanism",
    "GaussianMechanism",
    "MAX_STEPS",
    "DEFAULT_STEP_LIMIT",
    "check_steps",
    "noisy_count_event",
    "step_limit",
    "dpsgd_epsilon",
    "privacy_curve_points",
    "PoissonSubsampledGaussian",
    "PrivacyReport",
    "PureDP",
    "RDP_ORDERS",
    "ZCDP",
    "calibrate_dpsgd_noise",
    "calibrate_em_epsilon",
    "calibrate_noise",
    "calibrate_selection_mu",
    "calibrate_steps",
    "largest_param",
    "delta",
    "dpsgd_privacy_curve",
    "epsilon",
    "epsilon_and_accountant",
    "event_from_dict",
    "event_to_dict",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_log_delta",
    "gdp_mu",
    "gdp_mu_for_budget",
    "pdp_epsilon",
    "pdp_ratio_sq",
    "privacy_curve",
    "privacy_report",
    "pure_dp_delta",
    "pure_dp_epsilon",
    "pure_epsilon",
    "pure_to_zcdp",
    "rdp_to_delta",
    "rdp_to_epsilon",
    "sample_tnb",
    "selection_epsilon",
    "selection_plan",
    "selection_rdp",
    "selection_steps",
    "tnb_expected_count",
    "tnb_pmf",
    "zcdp_rho",
    "zcdp_to_delta",
    "zcdp_to_epsilon",
]

"""Short teaching notes ("what does this mean?") shown in the app; each under 80 words."""

from __future__ import annotations

NOTES: dict[str, str] = {
    "epsilon": (
        "**ε (epsilon)** bounds how much one person's data can change what the model reveals. "
        "With ε = 1, any outcome is at most e¹ ≈ 2.7 times more (or less) likely whether or not "
        "your sample was used. Smaller ε means stronger privacy and usually a less accurate model; "
        "ε above about 10 is a weak promise."
    ),
    "delta": (
        "**δ (delta)** is the small probability with which the ε promise may fail. It should be "
        "much smaller than 1 / (number of private samples), e.g. 10⁻⁵, so that the mechanism "
        "cannot simply publish a few records in the clear."
    ),
    "pdp": (
        "**Per-instance DP (pDP)** measures the privacy loss of each individual training "
        "sample as the run treated it. A sample whose gradient stayed below the clipping "
        "threshold loses less than the run's ε; one clipped at every step uses all of it (the "
        "spike at the target ε). pDP values read the private data in the clear and are not "
        "themselves a DP release."
    ),
    "attack_auc": (
        "**Attack AUC** scores a membership-inference attack that guesses whether a sample was "
        "in the private training set from the model's loss on it. 0.5 means the attacker does "
        "no better than a coin flip; 1.0 means perfect identification. DP bounds this AUC from "
        "above, more tightly at small ε."
    ),
    "conversions": (
        "**Same guarantee, other units.** μ-GDP says the run is as private as telling apart "
        "two Gaussians μ standard deviations apart; ρ-zCDP bounds Rényi divergences by ρ·α. "
        "Both convert to a whole δ(ε) curve, of which the reported (ε, δ) is one point."
    ),
    "mixed_dp": (
        "**Mixed DP**: a few public samples (no privacy needed) help a private learner choose "
        "its initialization, clipping and gradient subspace, so it pays less noise for the "
        "same ε on the private data."
    ),
}


def word_count(text: str) -> int:
    """Words of a note (markdown emphasis ignored)."""
    return len(text.replace("**", "").split())

"""Numbers quoted in docs/results/prototypes_fidelity.md: budgets, CoinPress radii, SNR, TopK gaps.

usage (repository root, after encoding pacs28 as in prototypes_fidelity_experiment.py):
    PYTHONPATH=$PWD python scripts/prototypes_fidelity_analysis.py
"""
import math, numpy as np
from mixdp_core import accounting as acc
from mixdp_core.methods import make_method
from mixdp_core.accounting.calibration import largest_param
from mixdp_core.accounting.conversions import zcdp_to_epsilon
from mixdp_core.methods.prototypes.dppl_mean import gaussian_tailbound, clip_radius, PAPER_BUDGET_SPLIT
from mixdp_core.features import get_features
from mixdp_core.data.splits import SplitSpec, make_split
from mixdp_core.methods.prototypes.utilities import l2_normalize, public_utilities
print("== budgets")
for eps in (0.5, 1, 3):
    m = make_method("dppl_mean", target_epsilon=eps)
    rho = largest_param(lambda r: acc.epsilon(m._event(r), delta=1e-5), target_epsilon=eps, lo=1e-10, hi=1e6)
    pn = eps**2/2
    print(f"eps={eps}: our rho={rho:.4f} (paper label sqrt(2rho)={math.sqrt(2*rho):.3f}); paper rho=eps^2/2={pn:.3f} -> (eps,1e-5)={zcdp_to_epsilon(pn, delta=1e-5):.2f}")
print("== CoinPress radius trajectories d=1280 n=60 add/remove (count noise ignored)")
d, n = 1280, 60
g = gaussian_tailbound(d, .01)
print("gamma", round(g, 2), "sqrt d", round(math.sqrt(d), 2))
for eps in (0.5, 1, 3):
    m = make_method("dppl_mean", target_epsilon=eps, budget_split=PAPER_BUDGET_SPLIT)
    rho = largest_param(lambda r: acc.epsilon(m._event(r), delta=1e-5), target_epsilon=eps, lo=1e-10, hi=1e6)
    _, sr = m._rhos(rho)
    for rule in ("paper text r+g", "reference code"):
        r = math.sqrt(d); traj = [round(r, 1)]; R = None
        for ri in sr:
            R = r + g if rule.startswith("paper") else clip_radius(r, g)
            sd = R / math.sqrt(2 * ri) / n
            r = math.sqrt(1 / n + sd * sd) * g
            traj.append(round(r, 1))
        print(f"  eps={eps} {rule}: radii {traj}, last R={R:.1f}, last noise norm={sd*math.sqrt(d):.0f}")
    m1 = make_method("dppl_mean", target_epsilon=eps)
    rho1 = largest_param(lambda r: acc.epsilon(m1._event(r), delta=1e-5), target_epsilon=eps, lo=1e-10, hi=1e6)
    _, sr1 = m1._rhos(rho1)
    sd1 = math.sqrt(d) / math.sqrt(2 * sr1[0]) / n
    print(f"  eps={eps} one step, R=sqrt(d): noise norm={sd1*math.sqrt(d):.0f}; per-coordinate sd {sd1:.2f}; n*sqrt(2rho)={n*math.sqrt(2*sr1[0]):.1f}")
print("== PACS28 EfficientNet-Lite0 features: class structure (seed 0 split, 2 public + 60 private)")
fs = get_features("image_folder:/tmp/dppl_pacs28", "efficientnet_lite0")
sp = make_split(fs, SplitSpec(public_per_class=2, private_per_class=60, seed=0))
E = l2_normalize(sp.X_private.astype(np.float64)); T = l2_normalize(sp.X_test.astype(np.float64))
C = sp.n_classes
M = np.stack([E[sp.y_private == c].mean(0) for c in range(C)])
S = T @ M.T   # cos-like score of test points vs class means of unit rows
own = S[np.arange(len(T)), sp.y_test]
other = np.array([np.delete(S[i], sp.y_test[i]).max() for i in range(len(T))])
oth_mean = np.array([np.delete(S[i], sp.y_test[i]).mean() for i in range(len(T))])
print(f"raw row norms: median {np.median(np.linalg.norm(sp.X_private,axis=1)):.1f}; mean cos within class {np.mean([ (E[sp.y_private==c]@E[sp.y_private==c].T).mean() for c in range(C)]):.3f}; overall {(E@E.T).mean():.3f}")
print(f"score gap own - mean other (Δcos): median {np.median(own-oth_mean):.3f}; own - best other: median {np.median(own-other):.3f}")
for eps in (0.5,1,3):
    m1 = make_method("dppl_mean", target_epsilon=eps)
    rho1 = largest_param(lambda r: acc.epsilon(m1._event(r), delta=1e-5), target_epsilon=eps, lo=1e-10, hi=1e6)
    _, sr1 = m1._rhos(rho1)
    print(f"  eps={eps}: one-step SNR n*sqrt(2rho)*median Δcos = {60*math.sqrt(2*sr1[0])*np.median(own-oth_mean):.2f} (vs sqrt(2 ln C)={math.sqrt(2*math.log(C)):.2f})")
print("== TopK utility gaps (normalised units, Δu = 1 after dividing by d_max-d_min = 2)")
U = public_utilities(sp.X_private, sp.y_private, sp.X_public, n_classes=C) / 2.0
N = U.shape[1]
Us = -np.sort(-U, axis=1)
g12 = np.median(Us[:, 0] - Us[:, 1]); g2m = np.median(Us[:, 1] - np.median(Us, axis=1)); g1m = np.median(Us[:,0]-np.median(Us,axis=1))
own_pub = np.array([np.sort(U[c, sp.y_public == c])[::-1] for c in range(C)])
rank_own = np.array([[int((U[c] > v).sum()) + 1 for v in own_pub[c]] for c in range(C)])
print(f"pool N={N}; median over classes: u1-u2={g12:.2f}, u1-median={g1m:.2f}, u2-median={g2m:.2f}; log(N-1)={math.log(N-1):.2f}")
print(f"ranks of the class's own 2 public samples: median best {np.median(rank_own[:,0])}, median second {np.median(rank_own[:,1])}; fraction of classes whose 2 own samples are the top-2: {np.mean((rank_own.max(1)<=2)):.2f}")
for eps in (0.5,1,3):
    # probability that the EM (K=1) picks an own-class sample; K=2 joint EM (monotone) picks both own
    p1=[]; p2=[]; p2p=[]
    for c in range(C):
        z = eps*U[c]; z -= z.max(); w = np.exp(z); p1.append(w[sp.y_public==c].sum()/w.sum())
        from mixdp_core.methods.prototypes.utilities import topk_set_log_prob
        own = np.flatnonzero(sp.y_public==c)
        p2.append(math.exp(topk_set_log_prob(U[c]*2, own, 2, epsilon=eps, sensitivity=2.0, monotone=True)))
        p2p.append(math.exp(topk_set_log_prob(U[c]*2, own, 2, epsilon=eps, sensitivity=2.0, monotone=False)))
    print(f"  eps={eps}: mean P[K=1 picks own class]={np.mean(p1):.2f}; P[K=2 set = both own] monotone={np.mean(p2):.2f}, paper scale={np.mean(p2p):.2f}")

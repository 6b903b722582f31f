"""The papers' figures of ``mixdp reproduce``, one module per family.

Importing this package registers every figure in :data:`.base.FIGURES` (re-exported by
:mod:`mixdp_core.runs.reproduce`, which imports this package). Each module declares its
figures with :func:`.base.figure` and builds them from the shared helpers there; no figure
module imports the driver, so the imports run one way:

* :mod:`.adamix` — ``adamix_epsilon``, ``fewshot``, ``adamix_ablation``, ``public_vs_private``,
  ``boost_vs_shots`` (AdaMix, Golatkar et al. 2022);
* :mod:`.subspace` — ``adamix_subspace`` (AdaMix Fig. 6: public vs random subspace);
* :mod:`.regimes` — ``regimes`` (the synthetic regime family);
* :mod:`.prototypes` — ``dppl_epsilon``, ``dppl_imbalance``, ``prototypes`` (DP prototypes);
* :mod:`.sparse` — ``sparse_finetune``, ``sparse_epsilon``, ``sparse_layers`` (sparse DP
  fine-tuning, Luo et al. 2021);
* :mod:`.episodes` — ``episodes`` (N-way K-shot episodes, the CD-FSL protocol of Luo et al.
  2021, Table 2, for every registered method).
"""

# registration order = the order of ``mixdp reproduce --list``
from . import base  # noqa: F401  (the framework: registry, context, helpers)
from . import adamix  # noqa: F401
from . import subspace  # noqa: F401
from . import regimes  # noqa: F401
from . import prototypes  # noqa: F401
from . import sparse  # noqa: F401
from . import episodes  # noqa: F401

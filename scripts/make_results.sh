#!/usr/bin/env bash
# Regenerate every committed result under docs/results/ (AdaMix family, DP prototypes).
#
# Usage: scripts/make_results.sh CIFAR10_DIR [STORE_DIR]
#   CIFAR10_DIR: the extracted ../shared/data/cifar10_images_jpg.tar.gz (train/<class>, test/<class>).
#   STORE_DIR:   run store for these runs (default: a fresh temporary folder).
# Features are taken from (or extracted into) $MIXDP_CACHE. The CIFAR-10 subset is the first
# 500 train and 200 test images per class (file-name order), EfficientNet-Lite0 at 128 px.
# Sparse fine-tuning results: scripts/sparse_finetune_results.py (see docs/results/sparse_finetune.md).
set -euo pipefail
cd "$(dirname "$0")/.."
CIFAR=${1:?usage: scripts/make_results.sh CIFAR10_DIR [STORE_DIR]}
STORE=${2:-$(mktemp -d)}
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
CIFAR_ARGS=(--dataset image_folder --dataset-root "$CIFAR" --dataset-arg max_per_class=500
            --dataset-arg max_test_per_class=200 --encoder efficientnet_lite0 --encoder-arg image_size=128)

adamix() {
  $PY scripts/adamix_results.py --store "$STORE" --dataset digits --encoder pixels \
    --out docs/results/digits.md --section "digits, pixels (D = 64)" --png docs/results/digits_pixels.png
  $PY scripts/adamix_results.py --store "$STORE" --dataset digits --encoder pixels --dataset-arg test_fraction=0.9 \
    --out docs/results/digits.md --section "digits, pixels, scarce private data (test_fraction = 0.9)" \
    --png docs/results/digits_pixels_scarce.png
  $PY scripts/adamix_results.py --store "$STORE" --dataset digits --encoder efficientnet_lite0 --encoder-arg image_size=128 \
    --out docs/results/digits.md --section "digits, efficientnet_lite0 features (D = 1280, image_size 128)" \
    --png docs/results/digits_efficientnet.png
  $PY scripts/adamix_results.py --store "$STORE" "${CIFAR_ARGS[@]}" \
    --out docs/results/cifar10.md --section "CIFAR-10 subset, efficientnet_lite0 features (D = 1280, image_size 128)" \
    --png docs/results/cifar10_efficientnet.png
}

prototypes() {
  local npz
  npz=$(mktemp --suffix=.npz)
  $PY - "$CIFAR" "$npz" <<'PYEOF'
import sys
import numpy as np
from mixdp_core.features import get_features
fs = get_features(f"image_folder:{sys.argv[1]}", "efficientnet_lite0", encoder_kwargs={"image_size": 128},
                  max_per_class=500, max_test_per_class=200)
np.savez(sys.argv[2], X_train=fs.X_train, y_train=fs.y_train, X_test=fs.X_test, y_test=fs.y_test,
         class_names=np.asarray(fs.class_names))
PYEOF
  $PY scripts/prototypes_results.py --out docs/results --tag digits
  $PY scripts/prototypes_results.py --out docs/results --tag cifar10 --only-extra \
    --features "cifar10 (500/class subset) / efficientnet_lite0=$npz"
}

case "${ONLY:-all}" in
  adamix) adamix ;;
  prototypes) prototypes ;;
  all) adamix; prototypes ;;
esac

#!/usr/bin/env bash
# Regenerate every committed result under docs/results/ (AdaMix family, DP prototypes).
#
# Usage: scripts/make_results.sh CIFAR10_DIR [STORE_DIR] [PACS_DIR]
#   CIFAR10_DIR: the extracted ../shared/data/cifar10_images_jpg.tar.gz (train/<class>, test/<class>).
#   STORE_DIR:   run store for these runs (default: a fresh temporary folder).
#   PACS_DIR:    the extracted ../shared/data/pacs_jpg.tar.gz (PACS/<domain>/<class>), for the
#                domain-shift row of the few-shot table (skipped if absent).
# ONLY=adamix|fewshot|prototypes|all selects the part; EPS / SEEDS override the grid.
# Features are taken from (or extracted into) $MIXDP_CACHE. The CIFAR-10 subset is the first
# 500 train and 200 test images per class (file-name order), EfficientNet-Lite0 at 128 px.
# Sparse fine-tuning results: scripts/sparse_finetune_results.py (see docs/results/sparse_finetune.md).
set -euo pipefail
cd "$(dirname "$0")/.."
CIFAR=${1:?usage: scripts/make_results.sh CIFAR10_DIR [STORE_DIR]}
STORE=${2:-$(mktemp -d)}
PACS=${3:-}
EPS=${EPS:-0.5 1 3 8}
SEEDS=${SEEDS:-0 1}
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
CIFAR_ARGS=(--dataset image_folder --dataset-root "$CIFAR" --dataset-arg max_per_class=500
            --dataset-arg max_test_per_class=200 --encoder efficientnet_lite0 --encoder-arg image_size=128)

GRID=(--epsilons $EPS --seeds $SEEDS)

adamix() {
  $PY scripts/adamix_results.py "${GRID[@]}" --store "$STORE" --dataset digits --encoder pixels \
    --out docs/results/digits.md --section "digits, pixels (D = 64)" --png docs/results/digits_pixels.png
  $PY scripts/adamix_results.py "${GRID[@]}" --store "$STORE" --dataset digits --encoder pixels --dataset-arg test_fraction=0.9 \
    --out docs/results/digits.md --section "digits, pixels, scarce private data (test_fraction = 0.9)" \
    --png docs/results/digits_pixels_scarce.png
  $PY scripts/adamix_results.py "${GRID[@]}" --store "$STORE" --dataset digits --encoder efficientnet_lite0 --encoder-arg image_size=128 \
    --out docs/results/digits.md --section "digits, efficientnet_lite0 features (D = 1280, image_size 128)" \
    --png docs/results/digits_efficientnet.png
  $PY scripts/adamix_results.py "${GRID[@]}" --store "$STORE" "${CIFAR_ARGS[@]}" \
    --out docs/results/cifar10.md --section "CIFAR-10 subset, efficientnet_lite0 features (D = 1280, image_size 128)" \
    --png docs/results/cifar10_efficientnet.png
}

# Few-shot regimes of issue 10 (2 public shots; tens of private samples per class; domain shift).
FEWSHOT_VARIANTS=(--variants paragon only_public fully_private ngd ppgd adamix adamix_honest)
fewshot() {
  local out=docs/results/fewshot.md dir
  dir=$(mktemp -d)
  $PY - "$CIFAR" "$dir" <<'PYEOF'
import sys
import numpy as np
from mixdp_core.features import get_features
fs = get_features(f"image_folder:{sys.argv[1]}", "efficientnet_lite0", encoder_kwargs={"image_size": 128},
                  max_per_class=500, max_test_per_class=200)
for n in (22, 62):  # 2 public + 20 / 60 private per class (first n train images per class, file order)
    idx = np.concatenate([np.flatnonzero(fs.y_train == c)[:n] for c in range(len(fs.class_names))])
    np.savez(f"{sys.argv[2]}/cifar10_{n}.npz", X_train=fs.X_train[idx], y_train=fs.y_train[idx],
             X_test=fs.X_test, y_test=fs.y_test, class_names=np.asarray(fs.class_names))
PYEOF
  $PY scripts/adamix_results.py "${GRID[@]}" "${FEWSHOT_VARIANTS[@]}" --store "$STORE" --dataset digits --encoder pixels \
    --public-per-class 1 --out $out --section "digits, pixels, 1 public / class (~125 private / class)" \
    --png docs/results/fewshot_digits_pixels_1shot.png
  $PY scripts/adamix_results.py "${GRID[@]}" "${FEWSHOT_VARIANTS[@]}" --store "$STORE" --dataset digits \
    --encoder efficientnet_lite0 --encoder-arg image_size=128 --public-per-class 2 --out $out \
    --section "digits, efficientnet_lite0, 2 public / class" --png docs/results/fewshot_digits_eff_2shot.png
  for n in 62 22; do
    $PY scripts/adamix_results.py "${GRID[@]}" "${FEWSHOT_VARIANTS[@]}" --store "$STORE" --dataset "features:$dir/cifar10_$n.npz" \
      --encoder efficientnet_lite0 --public-per-class 2 --out $out \
      --section "CIFAR-10, efficientnet_lite0 (128 px), 2 public + $((n - 2)) private / class" \
      --png docs/results/fewshot_cifar10_2shot_$((n - 2)).png
  done
  if [ -n "$PACS" ]; then
    $PY scripts/adamix_results.py "${GRID[@]}" "${FEWSHOT_VARIANTS[@]}" --store "$STORE" --dataset image_folder \
      --dataset-root "$PACS/art_painting" --public-from "image_folder:$PACS/photo" --encoder efficientnet_lite0 \
      --encoder-arg image_size=128 --public-per-class 2 --out $out \
      --section "PACS domain shift: private/test art_painting, 2 public / class from photo" \
      --png docs/results/fewshot_pacs_photo_to_art.png
  fi
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
  fewshot) fewshot ;;
  prototypes) prototypes ;;
  all) fewshot; adamix; prototypes ;;
esac

#!/usr/bin/env bash
# Regenerate every committed result table under docs/results/ — one `mixdp reproduce` command each.
#
# Usage: scripts/make_results.sh CIFAR10_DIR [STORE_DIR] [PACS_DIR]
#   CIFAR10_DIR: the extracted ../shared/data/cifar10_images_jpg.tar.gz (train/<class>, test/<class>).
#   STORE_DIR:   run store for these runs (default: a fresh temporary folder; an existing store
#                reuses its completed identical runs, so a killed regeneration resumes).
#   PACS_DIR:    the extracted ../shared/data/pacs_jpg.tar.gz (PACS/<domain>/<class>), for the
#                domain-shift and the 38-class sections of fewshot.md (skipped, and said so, if
#                not given; the 38-class folder is built under STORE_DIR; bash >= 4).
# Environment: ONLY=digits|cifar10|fewshot|prototypes|sparse_finetune|ablation|subspace|regimes|episodes|all
#   (default all) selects the tables; EPS / SEEDS override the ε and seeds of the AdaMix-family
#   sections (default 0.5,1,3,8 and 0,1,2,3: the properties are checked on means over >= 4
#   seeds), PSEEDS the seeds of prototypes.md and sparse_finetune.md
#   (default 0,1,2); EPISODES the episodes per cell of episodes.md (default 30, the committed size;
#   60 is the paper's protocol); OUT the output folder (default docs/results); WORKERS the local
#   worker processes; PY the Python.
# Each command rewrites its own section (between <!-- BEGIN/END AUTO title --> markers) of the
# markdown file and its PNGs/JSON; the hand-written reading around the sections is kept.
# Features come from (or are extracted into) $MIXDP_CACHE. The CIFAR-10 subsets are the first n
# train / 200 test images per class in file-name order (dataset options max_per_class /
# max_test_per_class), EfficientNet-Lite0 at 128 px.
# Time (2 shared cores, load average 8-13, 2 workers): measured with SEEDS=0 PSEEDS=0 (full ε grids)
# 56 min (digits 5, fewshot 16, cifar10 11, prototypes 8.5, sparse_finetune 16); the full grid,
# extrapolated from the per-figure times and feature-extraction times, ~1 h 50 min with an empty
# feature cache, ~1 h 35 min with the features already cached (measured when SEEDS defaulted to
# 0,1; the default 0,1,2,3 doubles the AdaMix-family sections' share).
set -euo pipefail
cd "$(dirname "$0")/.."
CIFAR=${1:-}  # only the tables that read CIFAR-10 need it (need_cifar); regimes and ablation do not
need_cifar() { : "${CIFAR:?usage: scripts/make_results.sh CIFAR10_DIR [STORE_DIR] [PACS_DIR] (this table reads CIFAR-10)}"; }
STORE=${2:-$(mktemp -d)}
PACS=${3:-}
EPS=${EPS:-0.5,1,3,8}
SEEDS=${SEEDS:-0,1,2,3}
PSEEDS=${PSEEDS:-0,1,2}
OUT=${OUT:-docs/results}
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

R=("$PY" -m mixdp_core.cli reproduce --out "$OUT" --store "$STORE" --no-progress ${WORKERS:+--workers "$WORKERS"})
EFF=(--encoder efficientnet_lite0 --encoder-arg image_size=128 --encoder-arg precision=fp32)  # the committed tables: fp32 features (torch-equal)
CIFAR500=(--dataset image_folder --dataset-root "$CIFAR" --dataset-arg max_per_class=500 --dataset-arg max_test_per_class=200 "${EFF[@]}")
AM=(--epsilons "$EPS" --seeds "$SEEDS")

digits() {  # docs/results/digits.md
  "${R[@]}" adamix_epsilon "${AM[@]}" --doc digits.md --stem digits_pixels --section "digits, pixels (D = 64)"
  "${R[@]}" adamix_epsilon "${AM[@]}" --dataset-arg test_fraction=0.9 --doc digits.md --stem digits_pixels_scarce \
    --section "digits, pixels, scarce private data (test_fraction = 0.9)"
  "${R[@]}" adamix_epsilon "${AM[@]}" "${EFF[@]}" --doc digits.md --stem digits_efficientnet \
    --section "digits, efficientnet_lite0 features (D = 1280, image_size 128)"
}

cifar10() {  # docs/results/cifar10.md
  need_cifar
  "${R[@]}" adamix_epsilon "${AM[@]}" "${CIFAR500[@]}" --doc cifar10.md --stem cifar10_efficientnet \
    --section "CIFAR-10 subset, efficientnet_lite0 features (D = 1280, image_size 128)"
}

fewshot() {  # docs/results/fewshot.md: few public shots, tens of private samples per class, domain shift
  need_cifar
  "${R[@]}" fewshot "${AM[@]}" --set public_per_class=1 --doc fewshot.md --stem fewshot_digits_pixels_1shot \
    --section "digits, pixels, 1 public / class (~125 private / class)"
  "${R[@]}" fewshot "${AM[@]}" "${EFF[@]}" --doc fewshot.md --stem fewshot_digits_eff_2shot \
    --section "digits, efficientnet_lite0, 2 public / class"
  for n in 60 20; do  # 2 public + n private per class: the first n + 2 train images per class
    "${R[@]}" fewshot "${AM[@]}" --dataset image_folder --dataset-root "$CIFAR" --dataset-arg max_per_class=$((n + 2)) \
      --dataset-arg max_test_per_class=200 "${EFF[@]}" --doc fewshot.md --stem fewshot_cifar10_2shot_$n \
      --section "CIFAR-10, efficientnet_lite0 (128 px), 2 public + $n private / class"
  done
  if [ -n "$PACS" ]; then
    "${R[@]}" fewshot "${AM[@]}" --dataset image_folder --dataset-root "$PACS/art_painting" \
      --public-from "image_folder:$PACS/photo" "${EFF[@]}" --doc fewshot.md --stem fewshot_pacs_photo_to_art \
      --section "PACS domain shift: private/test art_painting, 2 public / class from photo"
    # Many classes: the 28 (domain, class) pairs of PACS and the 10 CIFAR-10 classes, 62 train
    # (2 public + 60 private) and 18 test images each, in file-name order (copies: the image
    # loader refuses links that leave the dataset folder).
    MANY="$STORE/many38"
    if [ ! -f "$MANY/.complete" ]; then  # built into a side folder, marked complete last
      rm -rf "$MANY" "$MANY.partial"
      FINAL=$MANY
      MANY="$MANY.partial"
      for src in "$PACS"/*/*/ "$CIFAR"/train/*/; do
        src=${src%/}; cls=$(basename "$(dirname "$src")")_$(basename "$src")
        [ "$(basename "$(dirname "$src")")" = train ] && cls=cifar_$(basename "$src")
        mkdir -p "$MANY/train/$cls" "$MANY/test/$cls"
        mapfile -t files < <(ls "$src" | LC_ALL=C sort)  # code-point order, as the image loader
        [ "${#files[@]}" -ge 80 ] || { echo "make_results.sh: fewer than 80 images in $src" >&2; exit 1; }
        for f in "${files[@]:0:62}"; do cp "$src/$f" "$MANY/train/$cls/$f"; done
        for f in "${files[@]:62:18}"; do cp "$src/$f" "$MANY/test/$cls/$f"; done
      done
      mv "$MANY" "$FINAL"
      MANY=$FINAL
      touch "$MANY/.complete"
    fi
    "${R[@]}" fewshot "${AM[@]}" --dataset image_folder --dataset-root "$MANY" "${EFF[@]}" --doc fewshot.md \
      --stem fewshot_many38 --section "38 classes (28 PACS domain x class + 10 CIFAR-10), 2 public + 60 private / class"
    # The paper's regime (2-5 public shots, tens of private samples per class, many classes): the
    # same 38 classes with 3 public + 30 private per class (a seeded choice of the 59 others).
    "${R[@]}" fewshot "${AM[@]}" --dataset image_folder --dataset-root "$MANY" "${EFF[@]}" --doc fewshot.md \
      --set public_per_class=3 --set private_per_class=30 --stem fewshot_many38_3shot_30 \
      --section "38 classes, 3 public + 30 private / class"
  else
    echo "make_results.sh: no PACS_DIR given: the PACS and many-class sections of fewshot.md are left as they are" >&2
  fi
}

prototypes() {  # docs/results/prototypes.md
  need_cifar
  "${R[@]}" prototypes --seeds "$PSEEDS" --doc prototypes.md --stem prototypes_digits_pixels --section "digits / pixels"
  "${R[@]}" prototypes --seeds "$PSEEDS" "${EFF[@]}" --doc prototypes.md --stem prototypes_digits_efficientnet_lite0 \
    --section "digits / efficientnet_lite0"
  "${R[@]}" prototypes --seeds "$PSEEDS" "${CIFAR500[@]}" --doc prototypes.md --stem prototypes_cifar10_efficientnet_lite0 \
    --section "cifar10 (500/class subset) / efficientnet_lite0"
}

sparse_finetune() {  # docs/results/sparse_finetune.md (the DP-overhead table there: benchmarks/sparse_finetune.py)
  need_cifar
  "${R[@]}" sparse_layers --seeds "$PSEEDS" --doc sparse_layers.md --stem sparse_layers_digits \
    --section "digits (classes 0–4 → 5–9), ε = 1"
  "${R[@]}" sparse_epsilon --seeds "$PSEEDS" --doc sparse_epsilon.md --stem sparse_epsilon_digits \
    --section "digits (classes 0–4 → 5–9)"
  "${R[@]}" sparse_finetune --seeds "$PSEEDS" --doc sparse_finetune.md --stem sparse_finetune_digits \
    --section "digits (classes 0–4 → 5–9)"
  "${R[@]}" sparse_finetune --seeds "$PSEEDS" --dataset image_folder --dataset-root "$CIFAR" --set epochs=10 \
    --set pretrain_epochs=15 --set batch_size=250 --doc sparse_finetune.md --stem sparse_finetune_cifar10 \
    --section "CIFAR-10 subset (5 source classes → 5 other classes)"
}

ablation() {  # docs/results/ablation.md: AdaMix Fig. 5, one ingredient at a time (digits, 2 public per class)
  "${R[@]}" adamix_ablation --epsilons 0.5,1,3,8 --seeds "$PSEEDS" --doc ablation.md --stem ablation_digits_pixels \
    --section "digits, pixels, 2 public / class"
}

subspace() {  # docs/results/subspace.md: AdaMix Fig. 6, public vs random subspace (owner's-view diagnostic)
  "${R[@]}" adamix_subspace --epsilons 1,3,8 --seeds "$PSEEDS" --doc subspace.md --stem subspace_digits_pixels \
    --section "digits, pixels, 5 public / class"
  "${R[@]}" adamix_subspace --epsilons 1,3,8 --seeds "$PSEEDS" --set 'method_params={"projection": "rank"}' \
    --doc subspace.md --stem subspace_digits_pixels_rank --section "digits, pixels, 5 public / class, projection on the public gradients' rank (k <= C - 1)"
}

regimes() {  # docs/results/regimes.md (needs no CIFAR-10: ONLY=regimes scripts/make_results.sh '' STORE): the
  # synthetic regime family, 8 seeds (36 min on 2 cores with WORKERS=2, 2026-11-28; minutes with
  # 16 cores and WORKERS=12; RSEEDS=0,1,2,3 halves it: the committed table, commit c5f0364, about 37 min). Each regime is its own section, then the whole family at once (reusing
  # the stored runs) for the property summary.
  for r in fine_grained_100 many_class_100_d256 ten_class_ir10 classes_200_d512_1shot classes_50_d2048_5shot \
           classes_20_d128_ir10 scarce_20_ir10 scarce_50_d256_ir10 shift_7_d512 shift_100_d512; do
    "${R[@]}" regimes --epsilons 0.5,1,3,8 --seeds "${RSEEDS:-0,1,2,3,4,5,6,7}" --set "regimes=[\"$r\"]" --doc regimes.md \
      --stem "regimes_$r" --section "$r"
  done
  "${R[@]}" regimes --epsilons 0.5,1,3,8 --seeds "${RSEEDS:-0,1,2,3,4,5,6,7}" --doc regimes.md --stem regimes \
    --section "summary: the whole family"
  # regimes drawn at random from the family's ranges (drawn_regime in mixdp_core/runs/figures/regimes.py),
  # every draw 0-7 reported, 4 seeds
  "${R[@]}" regimes --epsilons 0.5,1,3,8 --seeds "${DSEEDS:-0,1,2,3}" --doc regimes.md --stem regimes_drawn \
    --set 'regimes=["drawn_0","drawn_1","drawn_2","drawn_3","drawn_4","drawn_5","drawn_6","drawn_7"]' \
    --section "drawn at random: drawn_0 to drawn_7"
  # 24 more draws, 30-53, first run after the last constant and default were chosen (2026-11-29):
  # none of them was looked at before, every one is reported
  "${R[@]}" regimes --epsilons 0.5,1,3,8 --seeds "${DSEEDS:-0,1,2,3}" --doc regimes.md --stem regimes_drawn_fresh \
    --set 'regimes=["drawn_30","drawn_31","drawn_32","drawn_33","drawn_34","drawn_35","drawn_36","drawn_37","drawn_38","drawn_39","drawn_40","drawn_41","drawn_42","drawn_43","drawn_44","drawn_45","drawn_46","drawn_47","drawn_48","drawn_49","drawn_50","drawn_51","drawn_52","drawn_53"]' \
    --section "drawn after the last choice: drawn_30 to drawn_53"
  # 12 more draws never run before the two-iterate default was chosen (2026-11-29): its validation
  "${R[@]}" regimes --epsilons 0.5,1,3,8 --seeds "${DSEEDS:-0,1,2,3}" --doc regimes.md --stem regimes_drawn_validation \
    --set 'regimes=["drawn_82","drawn_83","drawn_84","drawn_85","drawn_86","drawn_87","drawn_88","drawn_89","drawn_91","drawn_92","drawn_98","drawn_99"]' \
    --section "drawn after the two-iterate choice: drawn_82 to drawn_89, 91, 92, 98, 99"
}

episodes() {  # docs/results/episodes.md (needs no CIFAR-10): the CD-FSL protocol of Luo et al. Table 2 (5-way,
  # 5/20/50 shots, 15 query per class) for every feature method, EPISODES episodes per cell (default 30; the
  # paper's 60: EPISODES=60). PACS section with PACS_DIR; the paper's own targets where placed under the data
  # root (see mixdp_core/data/datasets.py CDFSL_FOLDERS), with no labelled public rows (the public knowledge is
  # the encoder's ImageNet pre-training, as the paper's miniImageNet pre-training).
  local E=(--set "episodes=${EPISODES:-30}" --doc episodes.md)
  "${R[@]}" episodes "${E[@]}" --stem episodes_digits_pixels \
    --section "digits, pixels, 5 public / class held out"
  if [ -n "$PACS" ]; then
    "${R[@]}" episodes "${E[@]}" --dataset image_folder --dataset-root "$PACS/art_painting" \
      --public-from "image_folder:$PACS/photo" "${EFF[@]}" --stem episodes_pacs_photo_to_art \
      --section "PACS art_painting, 5 public / class from photo, efficientnet_lite0"
  else
    echo "make_results.sh: no PACS_DIR given: the PACS section of episodes.md is left as it is" >&2
  fi
  local root=${MIXDP_DATA_ROOT:-$HOME/mixdp-data} key dir
  for key in cdfsl_cropdiseases:CropDiseases cdfsl_eurosat:EuroSAT cdfsl_isic:ISIC; do
    dir=$root/cdfsl/${key#*:}
    if [ -d "$dir" ]; then
      "${R[@]}" episodes "${E[@]}" --dataset "${key%%:*}" "${EFF[@]}" --set public_per_class=0 \
        --stem "episodes_${key%%:*}" --section "${key#*:} (CD-FSL), efficientnet_lite0, no labelled public rows"
    else
      echo "make_results.sh: no $dir: the ${key#*:} section of episodes.md is left out" >&2
    fi
  done
}

case "${ONLY:-all}" in
  digits) digits ;;
  cifar10) cifar10 ;;
  fewshot) fewshot ;;
  prototypes) prototypes ;;
  sparse_finetune) sparse_finetune ;;
  regimes) regimes ;;
  ablation) ablation ;;
  episodes) episodes ;;
  subspace) subspace ;;
  all) digits; fewshot; cifar10; prototypes; sparse_finetune; ablation; subspace; regimes; episodes ;;
  *) echo "make_results.sh: ONLY must be one of digits, cifar10, fewshot, prototypes, sparse_finetune, ablation, subspace, regimes, episodes, all; got ${ONLY}" >&2
     exit 2 ;;
esac

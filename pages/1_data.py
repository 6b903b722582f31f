"""Data & encoder: choose the dataset, encoder and split; extract features; upload your own."""

from pathlib import Path

import streamlit as st

from mixdp_core.app_support import charts, forms
from mixdp_core.app_support.data import (label_summary, labels_known, public_sample_images, split_problem, split_summary,
                                         weights_file_from_path)
from mixdp_core.app_support.jobs import feature_key
from mixdp_core.data.datasets import carries_features, public_source
from mixdp_core.app_support.resources import (
    data_settings, page_setup, poll_seconds, save_data_settings, show_field_errors, show_chart,
)
from mixdp_core.errors import MixDPError, field_and_message

manager = page_setup("Data & encoder")
settings = data_settings()

st.title("Data & encoder")
st.markdown("Pick the dataset and the frozen feature extractor. The split takes "
            "**public samples per class** from the training set (or from another domain); the rest "
            "is **private**. The test set is never used for training.")


@st.cache_data(show_spinner=False, max_entries=64)
def _summary(dataset, encoder, ppc, ir, public_from, seed, weights=None, dkw=()):
    return split_summary(dataset, encoder, public_per_class=ppc, imbalance_ratio=ir, dataset_kwargs=dict(dkw),
                         public_from=public_from, seed=seed,
                         encoder_kwargs={"pretrained": weights} if weights else None)


@st.cache_data(show_spinner=False, max_entries=64)
def _label_summary(dataset, ppc, ir, public_from, seed, dkw=()):
    return label_summary(dataset, public_per_class=ppc, imbalance_ratio=ir, public_from=public_from, seed=seed,
                         dataset_kwargs=dict(dkw))


@st.cache_data(show_spinner=False, max_entries=16)
def _samples(dataset, ppc, seed, public_from=None):
    return public_sample_images(dataset, per_class=min(4, ppc), public_per_class=ppc, seed=seed,
                                public_from=public_from)


# ------------------------------------------------------------------ dataset source
SOURCES = ["Registered dataset", "Upload features (.npz)", "Upload images (.zip of class folders)",
           "Image folder under the data root"]


def _current_source(spec: str) -> int:
    """The source the saved data set came from: the page opens on it, keeping it (it opened on
    'Registered dataset' and saved digits over an uploaded data set on every visit)."""
    from mixdp_core.data import data_root
    from mixdp_core.data.datasets import parse_spec

    key, arg = parse_spec(str(spec))
    if key == "features":
        return 1
    if key == "image_folder":
        try:
            inside = Path(arg or "").resolve().is_relative_to(Path(data_root()).resolve())
        except (OSError, ValueError):
            inside = False
        return 3 if inside else 2
    return 0


source = st.radio("Data source", SOURCES, horizontal=True, key="data_source",
                  index=_current_source(settings["dataset"]))
path_kinds = ("image_folder", "features")
registered = [d for d in forms.dataset_names() if d not in path_kinds]
errors: dict[str, str] = {}
dataset = settings["dataset"]
dataset_kwargs: dict = {}

if source == "Registered dataset":
    cur = dataset if dataset in registered else registered[0]
    dataset = st.selectbox("Dataset", registered, index=registered.index(cur), key="data_dataset",
                           help="digits ships with scikit-learn (offline); synthetic is generated from the options "
                                "below. Others need their files under $MIXDP_DATA (or a download from the command "
                                "line).")
    if dataset == "synthetic":
        st.caption("Gaussian class features generated from these options (deterministic): dial many classes, high "
                   "dimension, few shots, spectrum and separation. Public and private counts come from the split "
                   "settings on the right.")
        dataset_kwargs = forms.synthetic_options_form(settings.get("dataset_kwargs") or {})
elif source in ("Upload features (.npz)", "Upload images (.zip of class folders)"):
    if source == "Upload features (.npz)":
        st.caption("An `.npz` with arrays `X_train, y_train, X_test, y_test` (optional `class_names`, "
                   "`text_embeddings`). It is validated and stored in the feature cache.")
        label, ext, key, store, verb = "Feature file", "npz", "data_npz", forms.save_npz_upload, "Stored"
    else:
        st.caption("A `.zip` whose entries are `<class>/<image>` (one folder per class). It is checked "
                   "(size, file count, images only, no path escaping the folder) and extracted into the cache.")
        label, ext, key, store, verb = "Image archive", "zip", "data_zip", forms.extract_zip_upload, "Extracted"
    up = st.file_uploader(label, type=[ext], key=key)
    if up is not None:
        try:
            dataset = store(up.getvalue(), up.name)
            st.success(f"{verb} as `{dataset}`")
        except MixDPError as e:
            k, v = field_and_message(e, "upload")
            errors[k] = v
else:
    from mixdp_core.data import data_root

    rel = st.text_input(f"Folder (relative to the data root `{data_root()}`)", key="data_folder")
    if rel:
        try:
            spec = forms.dataset_spec_from_path("image_folder", rel)
            # the folder's bounded scan (class folders, files), here: an empty class folder was
            # saved and only failed at Launch, as a failed run
            from mixdp_core.data.datasets import load_dataset

            load_dataset(spec)
            dataset = spec
        except MixDPError as e:
            k, v = field_and_message(e, "path")
            errors[k] = v

# ------------------------------------------------------------------ encoder and split
encoders = forms.encoder_classes()
enc_names = list(encoders)


def _enc_label(n):
    c = encoders[n]
    return f"{n} — {'offline ✓' if c.offline else 'weights must be downloaded'}" + (" · text tower" if c.has_text else "")


c1, c2 = st.columns(2)
no_encoder = carries_features(dataset)  # synthetic rows / an uploaded .npz are the features
with c1:
    encoder = st.selectbox("Encoder", enc_names, index=enc_names.index(settings["encoder"])
                           if settings["encoder"] in enc_names else 0, format_func=_enc_label, key="data_encoder",
                           disabled=no_encoder)
    st.caption("Not used: this dataset's rows are already features, so no encoder runs."
               if no_encoder else encoders[encoder].description)
    if not no_encoder and not encoders[encoder].offline:
        st.warning(f"`{encoder}` weights are not bundled: extraction works only if they are already in the "
                   "local cache (or with network access), or from a weights file given below.")
    weights = None
    if encoder != "pixels" and not no_encoder:
        wtxt = st.text_input(
            "Weights file (optional, path under the data root)", key="data_weights",
            help="Your own weights for the encoder, used instead of downloading: a torchvision state_dict "
                 "(resnet50), an open_clip checkpoint (CLIP), timm model.safetensors or torch.hub weights "
                 "(dinov2). The path is relative to the data root ($MIXDP_DATA_ROOT).")
        if wtxt.strip():
            try:
                weights = weights_file_from_path(wtxt)
                st.caption(f"Weights: `{weights}`")
            except MixDPError as e:
                k, v = field_and_message(e, "weights")
                errors[k] = v
encoder_kwargs = {"pretrained": weights} if weights else {}
with c2:
    # settings from a link or an older session may lie outside the widgets' range: clamp, never crash
    # no min/max on the widgets: out of range, Streamlit only outlines the box in red and keeps
    # the old value; checked here instead, one line naming the field and its range
    ppc = st.number_input("Public samples per class", value=min(max(int(settings["public_per_class"]), 1),
                                                               forms.MAX_PUBLIC_PER_CLASS),
                          step=1, key="data_ppc", help=f"An integer in [1, {forms.MAX_PUBLIC_PER_CLASS}].")
    ir = st.number_input("Imbalance ratio of the private part (1 = balanced)",
                         value=min(max(float(settings["imbalance_ratio"]), 1.0), forms.MAX_FORM_IMBALANCE_RATIO),
                         step=1.0, key="data_ir",
                         help=f"A number in [1, {forms.MAX_FORM_IMBALANCE_RATIO:g}]. Long tail: class ranked r keeps "
                              "n_max · IR^(−r/(C−1)) private samples.")
    for field_, bad in (("public_per_class", forms.range_error(ppc, 1, forms.MAX_PUBLIC_PER_CLASS)),
                        ("imbalance_ratio", forms.range_error(ir, 1, forms.MAX_FORM_IMBALANCE_RATIO, integer=False))):
        if bad:
            errors[field_] = bad
    # synthetic is its own second domain: its public rows from class means moved by "shift"
    # synthetic's public domain is synthetic's own (shifted) rows: offered for synthetic only
    domains = ["(same dataset)"] + [d for d in registered if (d != dataset and d != "synthetic")
                                    or d == dataset == "synthetic"]
    pf = st.selectbox("Public data from (domain shift, optional)", domains,
                      index=domains.index(settings["public_from"]) if settings["public_from"] in domains else 0,
                      key="data_public_from",
                      help="Another dataset with the same classes provides the public samples; for synthetic, "
                           "choose synthetic: its public domain, shifted by the option 'Public → private shift'.")
    public_from = None if pf == "(same dataset)" else pf
    try:
        public_source(dataset, dataset_kwargs, public_from)
    except MixDPError as e:
        k, v = field_and_message(e, "public_from")
        errors[k] = v

if not errors:  # settings no run could use are shown, never saved (Launch stays blocked)
    bad = split_problem(dataset, public_per_class=int(ppc), imbalance_ratio=float(ir), public_from=public_from,
                        seed=int(settings.get("seed", 0)),
                        ready_pixels=feature_key(dataset, "pixels", None, dataset_kwargs) in manager.features_ready,
                        dataset_kwargs=dataset_kwargs)
    if bad:
        errors[bad[0]] = bad[1] + " — not saved; Train and Compare keep the last valid settings"
if errors:
    show_field_errors(errors)
else:
    save_data_settings(dataset=dataset, encoder=encoder, public_per_class=int(ppc), imbalance_ratio=float(ir),
                       public_from=public_from, encoder_kwargs=encoder_kwargs, dataset_kwargs=dataset_kwargs)
    st.info(f"Current settings (used by Train and Compare): **{dataset}** · "
            + ("features as given (no encoder)" if no_encoder else f"**{encoder}**")
            + f" · {int(ppc)} public/class · IR {float(ir):g}" + (f" · public from {public_from}" if public_from else ""))

# ------------------------------------------------------------------ features
st.subheader("Features")
# each data set with its own options: the synthetic public domain is the same options, shifted
_pub_spec, _pub_kw = public_source(dataset, dataset_kwargs, public_from) if public_from and not errors else (public_from, {})
keys = [feature_key(dataset, encoder, encoder_kwargs, dataset_kwargs)] + (
    [feature_key(_pub_spec, encoder, encoder_kwargs, _pub_kw)] if public_from else [])
ready = all(k in manager.features_ready for k in keys)
job = manager.get(st.session_state.get("feature_job"))
if no_encoder:
    st.caption("This dataset's rows are the features: nothing to extract (generated or loaded at run time).")
elif encoder == "pixels":
    st.caption("`pixels` uses the raw pixel values: nothing to extract (loaded at run time in a second).")
light = encoder == "pixels" or no_encoder  # nothing to extract: the button only loads the rows ahead of a run
if st.button(("Load the rows now (optional)" if light else "Extract features") if not ready
             else "Features ready — re-check the cache",
             type="primary" if not ready and not light else "secondary",
             icon=":material/check_circle:" if ready else ":material/memory:",
             disabled=bool(errors), key="data_extract"):
    jobs = []
    for ds, kw, name in [(dataset, dataset_kwargs, dataset)] + (
            [(_pub_spec, _pub_kw, f"{public_from} (public domain)")] if public_from else []):
        # with the data set's own options (they were dropped: the loader's defaults were loaded
        # and reported, 2000 / 500 rows of dimension 64, whatever the dials said)
        job = manager.submit_features(ds, encoder, encoder_kwargs=encoder_kwargs, dataset_kwargs=kw)
        jobs.append((name, job.job_id))
    st.session_state["feature_job"] = job.job_id
    # every job of the click, each under its data set's name (with a public domain only the last was
    # shown: the private upload's line read digits' counts)
    st.session_state["feature_jobs"] = jobs

_jobs = [(ds, manager.get(jid)) for ds, jid in st.session_state.get("feature_jobs") or
         [("", st.session_state.get("feature_job"))]]
_jobs = [(ds, j) for ds, j in _jobs if j is not None]


@st.fragment(run_every=poll_seconds() if any(not j.finished for _, j in _jobs) else None)
def feature_progress():
    jobs = [(ds, manager.get(j.job_id)) for ds, j in _jobs]
    if not jobs:
        return
    named = len(jobs) > 1
    for ds, j in jobs:
        p, who = j.progress, (f"`{ds}`: " if named else "")
        if j.state == "failed":
            st.error(f"{who}Feature extraction failed: {j.error}")
        elif j.finished:
            st.success(f"{who}Features ready: {p.get('n_train', '?')} train / {p.get('n_test', '?')} test samples, "
                       f"dimension {p.get('dim', '?')}" + (" (from cache)" if p.get("cache_hit") else ""))
        else:
            done, total = p.get("done", 0), p.get("total", 0)
            st.progress(done / total if total else 0.0,
                        text=f"{who}extracting {p.get('split', '')}: {done} / {total} images" if total else "loading…")
    if not all(j.finished for _, j in jobs):
        return
    last = jobs[-1][1].job_id
    if st.session_state.get("feature_job_drawn") != last:
        st.session_state["feature_job_drawn"] = last
        st.rerun()


feature_progress()

ready = all(k in manager.features_ready for k in keys)
pixels_ready = feature_key(dataset, "pixels", None, dataset_kwargs) in manager.features_ready
from_labels = not ready and labels_known(dataset, pixels_ready) and not public_from
st.subheader("Split")
if (ready or from_labels) and not errors:
    try:
        if ready:
            s = _summary(dataset, encoder, int(ppc), float(ir), public_from, int(settings.get("seed", 0)), weights,
                         tuple(sorted(dataset_kwargs.items())))
        else:
            s = _label_summary(dataset, int(ppc), float(ir), public_from, int(settings.get("seed", 0)),
                               tuple(sorted(dataset_kwargs.items())))
    except MixDPError as e:
        show_field_errors(dict([field_and_message(e, "split")]))
    else:
        show_chart(charts.class_counts_figure(s, imbalance_ratio=float(ir)), key="data_counts", name="class_counts")
        n_min = sum(s["minority"]) if float(ir) > 1 else 0
        st.caption(
            "**Owner's view, not private:** the private counts describe the private data; they are shown to "
            "the data owner here and are not a DP release (publishing them would cost privacy). "
            f"{sum(s['public'])} public, {sum(s['private'])} private, {sum(s['test'])} test samples"
            + (f"; feature dimension {s['dim']}" if s.get("dim") else " (from the labels: no extraction needed)")
            + (f"; {n_min} minority class(es) (the 25 % of classes the seed puts at the long tail's end, not the smallest by count, marked ★) — their accuracy is "
               "reported separately." if n_min else "; balanced private part (imbalance ratio 1): no minority class.")
            + (" Text embeddings available (zero-shot / text init)." if s.get("has_text") else ""))
    if labels_known(dataset, pixels_ready) and not no_encoder:  # synthetic rows, an .npz of features: not images
        try:
            imgs = _samples(dataset, int(ppc), int(settings.get("seed", 0)), public_from)
        except MixDPError:
            imgs = {}
        where = f" (from the public domain {public_from})" if public_from else ""
        fig = charts.sample_grid_figure(imgs, title=f"Sample images: public samples of each class{where} "
                                                    "(public, no privacy cost)") if imgs else None
        if fig is not None:
            st.plotly_chart(fig, key="data_samples", width="stretch", config=charts.LIVE_CONFIG)
elif not errors:  # nothing to extract for pixels or rows that are features: name the button there is
    st.caption(("Click *Load the rows now* above" if light else "Extract the features") +
               " to see the per-class counts of the split.")

"""Weights: try Eq. 5 weights and K on a run's stored judgments, and the seed's weight table."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pages.shared import (
    change_in_points,
    ensure_app_frame,
    require_dataset,
    require_run,
    session,
    shared_result,
    simulated_badge,
)
from pcf.analysis.markdown import escape_markdown
from pcf.analysis.results import SIMULATED_NOTE, is_adaptive, is_simulated, stopping_label
from pcf.analysis.weight_playground import (
    WEIGHT_NAMES,
    PackedRun,
    WeightOutcome,
    evaluate_weights,
    run_diagnostics,
    stored_packed_run,
)
from pcf.analysis.whatif import budget_curve
from pcf.reports.charts import budget_chart
from pcf.reports.tables import weight_table
from pcf.store import list_runs
from pcf.weights import PRESETS, Weights

PRESET_KEY = "weights_preset"
K_KEY = "weights_k"
TABLE_RUNS_KEY = "weights_table_runs"
BUDGET_KEY = "weights_budget"
CUSTOM = "custom"
WEIGHT_KEYS = tuple(f"weights_{name}" for name in WEIGHT_NAMES)
WEIGHT_LABELS = ("ws: mean score S", "wB: Borda B", "wv: top votes V", "wu: certainty U")


def apply_preset() -> None:
    """Set the sliders to the chosen preset."""
    preset = PRESETS.get(st.session_state[PRESET_KEY])
    if preset is not None:
        for key, value in zip(WEIGHT_KEYS, preset.as_tuple(), strict=True):
            st.session_state[key] = float(value)


def match_preset() -> None:
    """Name the preset the sliders now equal, or ``custom``."""
    chosen = tuple(st.session_state[key] for key in WEIGHT_KEYS)
    st.session_state[PRESET_KEY] = next(
        (name for name, w in PRESETS.items() if w.as_tuple() == chosen), CUSTOM
    )


ensure_app_frame()
st.title("Weights")
st.caption(
    "Eq. 5: C = ws·S + wB·B + wv·V + wu·U. Every change is recomputed from the run's stored "
    "judgments of execution 0 (a matched single-run diagnostic); no judge is called. Accuracy "
    "counts the items with a gold id; direct is the same weights on the canonical call alone."
)

with session() as s:
    dataset = require_dataset(s)
    run = require_run(s)
    listwise_runs = [r for r in list_runs(session=s, dataset_id=dataset.id) if r.protocol != "apoc"]
full_runs = [r for r in listwise_runs if not is_adaptive(r)]

simulated_badge(run)
if run.protocol == "apoc":
    name = escape_markdown(run.name)
    st.info(f"Run **{name}** is an APOCJudge run: pairwise verdicts have no weights.")
    st.stop()
current = shared_result(stored_packed_run, run, "Loading the run's judgments…")


def show_accuracy(outcome: WeightOutcome) -> None:
    """Accuracy beside direct's, and how many items got better and worse."""
    cols = st.columns(4)
    cols[0].metric(
        "Accuracy",
        f"{100 * outcome.accuracy:.1f}%",
        **change_in_points(100 * (outcome.accuracy - outcome.direct_accuracy), "pts vs direct"),
    )
    cols[1].metric("Direct accuracy", f"{100 * outcome.direct_accuracy:.1f}%")
    cols[2].metric("Improved", outcome.improved, help="Direct wrong, consensus right.")
    cols[3].metric("Regressed", outcome.regressed, help="Direct right, consensus wrong.")


if any(key not in st.session_state for key in (PRESET_KEY, *WEIGHT_KEYS)):
    st.session_state[PRESET_KEY] = "proposed"
    apply_preset()
if st.session_state.get(K_KEY) not in range(1, current.k + 1):
    st.session_state[K_KEY] = current.k


@st.fragment
def playground(current: PackedRun) -> None:
    """Sliders and their results; a change reruns only this part, so a key held down on a
    slider is answered quickly and the slider never jumps back to an older value."""
    st.subheader(f"Playground: {escape_markdown(run.name)}")
    controls, results = st.columns([1, 2], gap="large")
    with controls:
        st.selectbox(
            "Preset", [*PRESETS, CUSTOM], key=PRESET_KEY, on_change=apply_preset, help="METHOD.md"
        )
        for key, label in zip(WEIGHT_KEYS, WEIGHT_LABELS, strict=True):
            st.slider(label, 0.0, 1.0, step=0.01, key=key, on_change=match_preset)
        if current.k > 1:
            st.slider(
                "K: first K orderings of execution 0",
                1,
                current.k,
                key=K_KEY,
                help="The K ablation uses prefixes of the stored schedule: no extra calls.",
            )
        else:
            st.caption("K = 1: this run has one call per execution.")

    try:
        weights = Weights(*(st.session_state[key] for key in WEIGHT_KEYS))
    except ValueError:
        results.error("The weights cannot all be zero: raise at least one.")
        return

    try:
        outcome = evaluate_weights(current, weights, k=st.session_state[K_KEY])
    except ValueError as exc:
        results.info(f"{exc}: accuracy needs the dataset's gold ids.")
        return

    with results:
        show_accuracy(outcome)
        st.caption(
            f"{outcome.n} items with gold; weights sum to {sum(weights.as_tuple()):.2f} "
            "(used as given, not normalised)."
        )
        st.markdown(f"**Changed items** ({len(outcome.changed)}): winner differs from direct")
        st.dataframe(outcome.changed, hide_index=True, width="stretch")


if current.stop_on is None:
    playground(current)
else:  # an adaptive run, under the weights it stopped on, over every call it made
    st.subheader(f"Adaptive run: {escape_markdown(run.name)}")
    try:
        outcome = evaluate_weights(current, current.stop_on)
    except ValueError as exc:
        st.info(f"{exc}: accuracy needs the dataset's gold ids.")
    else:
        show_accuracy(outcome)
        st.caption(
            f"{outcome.n} items with gold, decided as the run settled them "
            f"({stopping_label(run)}), over every call it made. No sliders and no K here: the "
            "run stopped each item once its winner under these weights was settled, so other "
            "weights or the first K calls would show winners its full run would not. Pick a "
            "full run to try weights."
        )

st.subheader("Weight table")
names = [r.name for r in full_runs]
if not set(st.session_state.get(TABLE_RUNS_KEY, [None])) <= set(names):  # none, or another's
    st.session_state[TABLE_RUNS_KEY] = names
st.multiselect("Runs", names, key=TABLE_RUNS_KEY)
table_runs = [r for r in full_runs if r.name in st.session_state[TABLE_RUNS_KEY]]
if not table_runs:
    st.info("Choose at least one run.")
    st.stop()
try:
    spinner = "Deciding the run under every preset…"
    rows = [shared_result(run_diagnostics, r, spinner).presets for r in table_runs]
except ValueError as exc:
    st.info(f"{exc}: the weight table needs the dataset's gold ids.")
    st.stop()
table = weight_table(pd.concat(rows, ignore_index=True))
st.dataframe(
    table,
    width="stretch",
    column_config={
        **{name: st.column_config.NumberColumn(format="%.2f") for name in WEIGHT_NAMES},
        **{
            f"{p.name} accuracy %": st.column_config.NumberColumn(
                f"{p.name}: acc.", format="%.1f%%", help=f"Accuracy of {p.name}"
            )
            for p in table_runs
        },
        **{
            f"{p.name} Δ vs direct": st.column_config.NumberColumn(
                f"{p.name}: Δ", format="%+.1f", help="Points against direct"
            )
            for p in table_runs
        },
    },
)
st.caption(
    "Rows: the six presets of METHOD.md. Per run: accuracy on items with gold with the calls of "
    "execution 0, and the difference to direct (the same preset on the canonical call) in points."
    + (
        " Adaptive runs are left out: each settled its winners on one set of weights."
        if len(full_runs) < len(listwise_runs)
        else ""
    )
    + (
        f" Simulated runs included: {SIMULATED_NOTE}."
        if any(is_simulated(r) for r in table_runs)
        else ""
    )
)

st.subheader("Adaptive budget")
st.caption(
    "What stopping each item early would have given on this run: every policy replayed on its "
    "stored calls (no judge call; `pcf whatif` gives the same figures, and `pcf judge "
    "--adaptive` makes them for real). `certain` keeps the full run's winner by construction; "
    "`confident` stops once the chance of another winner is at most R."
)
if current.stop_on is not None:
    st.caption("This run is adaptive: it holds no full run to replay. Pick a full run.")
elif st.toggle("Show the curve (replays every item; a few seconds)", key=BUDGET_KEY):
    curve = shared_result(budget_curve, run, "Replaying the stopping policies on the run…")
    st.altair_chart(budget_chart(curve), width="stretch")
    st.dataframe(
        curve.pivot_table(index=["policy", "calls_per_item"], columns="measure", values="share")
        .reset_index()
        .sort_values("calls_per_item"),
        hide_index=True,
        width="stretch",
    )
    if run.backend == "simulated":
        st.caption(f"Simulated judge: {SIMULATED_NOTE}.")

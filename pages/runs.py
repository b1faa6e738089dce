"""Runs: the dataset's runs, and starting a run with a cost estimate and live progress."""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from pages.shared import current_actor, engine, ensure_app_frame, require_dataset, session
from pcf.access import ALLOWED_BASE_URLS_ENV, AccessDeniedError, Permission
from pcf.analysis.markdown import escape_markdown
from pcf.analysis.precompute import keep_results
from pcf.analysis.results import SIMULATED_NOTE, is_simulated, run_listing_priced, run_summary
from pcf.choices import SCHEDULES, SIMULATED_MODEL
from pcf.judges import PROVIDERS, key_names, parse_model
from pcf.judges.batch_api import BatchAPIError
from pcf.prices import UNPRICED, cost_text
from pcf.reports.tables import runs_table
from pcf.runs.background import background_runs, start_run
from pcf.runs.batch import collect_runs
from pcf.runs.batch_status import batch_overview
from pcf.runs.estimate import CostEstimate, estimate_run, settings_conflict
from pcf.runs.live import RunReport
from pcf.runs.manage import MAX_COST_ENV, backend_problem, default_cost_cap, own_key_needed
from pcf.runs.spec import PROTOCOLS, RunSpec
from pcf.store import get_run, list_runs, session_scope

# Runs of at most this many planned calls are estimated as the form changes; larger ones on
# demand (the estimate renders every planned prompt). A page's module holds no bare string:
# Streamlit's "magic" would print it to every visitor.
ESTIMATE_AT_ONCE_CALLS = 20_000
ESTIMATE_KEY = "runs_estimate_of"  # (spec, estimate) of the last estimate asked for
MODEL_KEY = "runs_model"
BASE_URL_KEY = "runs_base_url"
KEY_KEY = "runs_own_key"  # a key typed for one run: kept in this session only, never stored
NAME_KEY = "runs_name"
FORGOTTEN_KEY = "runs_forgotten"
PROGRESS_INTERVAL_S = 1.0


ensure_app_frame()
actor = current_actor()
runs_allowed = actor.may(Permission.RUN)
st.title("Runs")

with session() as s:
    dataset = require_dataset(s)
    runs = list_runs(session=s, dataset_id=dataset.id)
    listing = run_listing_priced(session=s, dataset_id=dataset.id)
    batch_rows = batch_overview(runs, session=s)

st.caption(f"Runs of dataset **{escape_markdown(dataset.name)}** ({dataset.n_items} items).")
if runs:
    # Settings, then calls and cost: one table of all thirteen columns is cut on a laptop.
    table = runs_table(listing)
    usage = list(table.columns[table.columns.get_loc("calls") :])  # from "calls" on, by name
    st.dataframe(
        table.drop(columns=usage),
        hide_index=True,
        width="stretch",
        column_config={"executions": st.column_config.NumberColumn("exec.", help="Executions")},
    )
    st.dataframe(
        table[["run", *usage]],
        hide_index=True,
        width="stretch",
        column_config={
            "calls": st.column_config.NumberColumn(
                help="Requests sent to the judge, retries included", format="localized"
            ),
            "cache hits": st.column_config.NumberColumn("cached", help="Calls the cache answered"),
            "failures": st.column_config.NumberColumn("failed", help="Calls left failed"),
            "input tokens": st.column_config.NumberColumn("tokens in", format="localized"),
            "output tokens": st.column_config.NumberColumn("tokens out", format="localized"),
            "cost": st.column_config.TextColumn(help="USD, or unpriced: the model has no price"),
        },
    )
    if any(is_simulated(r) for r in runs):
        st.caption(
            "Simulated judge (backend `simulated`, or a replay of its judgments): "
            f"{SIMULATED_NOTE}."
        )
else:
    st.info("No run on this dataset yet: start one below.")


def forget_lost(run: str) -> None:
    """The Forget button: the calls of the run's lost batches become failed calls."""
    try:
        with session() as s:
            (forgot,) = collect_runs([run], session=s, actor=actor, forget_lost=True)
    except (ValueError, BatchAPIError) as exc:
        st.session_state[FORGOTTEN_KEY] = (run, st.error, str(exc))
    else:
        st.session_state[FORGOTTEN_KEY] = (
            run,
            st.success,
            f"{len(forgot.forgotten)} lost batches forgotten: {forgot.failures} calls "
            "stored as failed (batch_lost); `pcf judge ... --retry-failed` asks them again.",
        )


forgotten = st.session_state.pop(FORGOTTEN_KEY, None)
if batch_rows:
    st.subheader("Provider batches")
    st.caption(
        "Runs sent with `pcf judge ... --batch` (half price, results within 24 h). Collect "
        "stores the answers of the batches that ended; it is safe to press again."
    )
for row in batch_rows:
    with st.container(border=True):
        st.markdown(f"**{escape_markdown(row['run'])}** — {row['status']}")
        st.caption(
            f"{row['collected']} of {row['batches']} batches collected, "
            f"{row['requests']} requests sent."
        )
        lost = len(row["lost"])
        if (
            runs_allowed
            and row["to_collect"]
            and st.button("Collect", key=f"runs_collect_{row['run']}", icon=":material/download:")
        ):
            try:
                with session() as s:
                    (collected,) = collect_runs([row["run"]], session=s, actor=actor)
            except (ValueError, BatchAPIError) as exc:
                st.error(str(exc))
            else:
                lost = len(collected.lost)
                if collected.capped:
                    st.error(collected.capped)
                if collected.stored or not lost:
                    st.success(
                        f"{collected.stored} calls stored, {collected.failures} failed; "
                        f"{collected.pending} batches still running."
                    )
        if lost:
            st.warning(
                f"The provider answers 404 (not found) for {lost} of these batches: it lost "
                "them, or they were sent with another key or server. Forget them to make "
                "their calls failed calls, which `pcf judge ... --retry-failed` asks again; "
                "the answers stored stay."
            )
        if lost and runs_allowed:
            st.button(
                "Forget lost batches",
                key=f"runs_forget_{row['run']}",
                icon=":material/link_off:",
                on_click=forget_lost,
                args=(row["run"],),
            )
        if forgotten and forgotten[0] == row["run"]:
            forgotten[1](forgotten[2])


if not runs_allowed:
    st.caption(f"Your role ({actor.role.value}) reads runs; an admin starts them.")
    st.stop()
st.subheader("Start a run")
left, right = st.columns(2, gap="large")
with left:
    named = st.text_input(
        "Model",
        f"simulated/{SIMULATED_MODEL}",
        key=MODEL_KEY,
        help=f"provider/name, the provider one of {', '.join(PROVIDERS)}: openai/gpt-4o-mini, "
        "google/gemini-2.5-flash, azure/DEPLOYMENT, ollama/llama3.1...",
    ).strip()
    base_url = (
        st.text_input(
            "Base URL (optional)",
            key=BASE_URL_KEY,
            placeholder="http://localhost:8000/v1",
            help="An OpenAI-compatible server (vLLM, Ollama, llama.cpp...; yours needs no key), "
            "an Azure OpenAI endpoint, or a provider's proxy.",
        ).strip()
        or None
    )
    try:
        backend, model, base_url = parse_model(named, base_url=base_url)
    except ValueError as exc:
        st.error(escape_markdown(str(exc)))
        st.stop()
    unavailable = backend_problem(backend, base_url)
    own_key = None
    if own_key_needed(actor, backend, base_url):
        st.info(
            f"This server's `{key_names(backend)}` goes only to {backend} and to the servers "
            f"the operator lists (`{ALLOWED_BASE_URLS_ENV}`), so it is not sent to this base "
            "URL. Give a key for this run only: it is used for this run and never stored or "
            "shown."
        )
        own_key = st.text_input("API key for this run", type="password", key=KEY_KEY) or None
    elif unavailable:
        st.warning(f"{backend} is not available: {unavailable}.")
    elif backend != "simulated":
        st.caption(f"Using the key in `{key_names(backend)}` (never shown or stored).")
    protocol = st.selectbox(
        "Protocol", PROTOCOLS, index=PROTOCOLS.index("pcf"), key="runs_protocol"
    )
    multi_call = protocol in ("pcf", "repeated")
    st.caption(
        "direct: the canonical order alone (K=1); pcf: K scheduled orderings; repeated: K copies "
        "of the canonical order (control); apoc: pairs in both orders plus keyed confirmation."
    )
with right:
    k = st.number_input("K: orderings per item", 1, 720, 7, key="runs_k", disabled=not multi_call)
    schedule = st.selectbox("Schedule", SCHEDULES, key="runs_schedule", disabled=protocol != "pcf")
    executions = st.number_input(
        "Executions", 1, 20, 1, key="runs_executions", disabled=not multi_call
    )
    seed = st.number_input("Seed", 0, 2**31 - 1, 0, key="runs_seed")
    limit = st.number_input("Items (0 = all)", 0, dataset.n_items, 0, key="runs_limit")
    concurrency = st.number_input("Concurrent calls", 1, 256, 16, key="runs_concurrency")
    cap = st.number_input(
        "Cost cap (USD, 0 = none)",
        0.0,
        value=default_cost_cap() or 0.0,
        step=1.0,
        key="runs_max_cost",
        help="Refused when the estimate passes it; stops once the run's spend reaches it "
        f"(its calls stay; a higher cap resumes it). The operator's default: {MAX_COST_ENV}.",
    )

limit_items = int(limit) or None
try:
    spec = RunSpec(
        dataset.name,
        backend=backend,
        model=model or "model",
        base_url=base_url,
        protocol=protocol,
        k=int(k),
        schedule=schedule,
        executions=int(executions),
        seed=int(seed),
        limit=limit_items,
        concurrency=int(concurrency),
    )
except ValueError as exc:
    st.error(str(exc))
    st.stop()
suggested = spec.run_name + (f"-n{limit_items}" if limit_items else "")
name = st.text_input("Run name", key=NAME_KEY, placeholder=suggested).strip() or suggested
spec = replace(spec, name=name, model=model)
st.caption("An existing run of the same name and settings resumes where it stopped.")


def show_estimate(estimate: CostEstimate) -> None:
    """The calls, tokens and cost the run would take: calls in one row, tokens and cost in the
    next, so that no figure is cut on a laptop's screen."""
    calls = st.columns(4)
    calls[0].metric("Planned calls", f"{estimate.planned:,}", help="Items x K x executions.")
    calls[1].metric("Already stored", f"{estimate.stored:,}", help="Calls of this run made before.")
    calls[2].metric(
        "From cache", f"{estimate.cached:,}", help="Same prompt and settings answered before."
    )
    calls[3].metric("Calls to send", f"{estimate.to_call:,}")
    usage = st.columns(4)
    usage[0].metric(
        "Input tokens",
        count_text(estimate.input_tokens),
        help=f"{estimate.input_tokens:,}: prompt characters / 4.",
    )
    usage[1].metric(
        "Output tokens",
        count_text(estimate.output_tokens),
        help=f"{estimate.output_tokens:,}: an assumed answer length per candidate.",
    )
    usage[2].metric(
        "Estimated cost",
        cost_text(estimate.cost_usd),
        help="From the price table (pcf.prices; extend it with PCF_PRICES).",
    )
    if estimate.batch_cost_usd is not None:
        st.caption(
            f"Sent as provider batches (`pcf judge ... --batch`, results within 24 h): "
            f"{cost_text(estimate.batch_cost_usd)} at the batch price."
        )
    if estimate.confirmations_max:
        st.caption(f"Plus up to {estimate.confirmations_max} APOCJudge confirmation calls.")


def count_text(count: int) -> str:
    """``count`` with thousands separators, or in millions from ten million on (``12.3M``):
    what a quarter of the page shows in full."""
    return f"{count:,}" if count < 10_000_000 else f"{count / 1e6:,.1f}M"


def estimated(spec: RunSpec) -> CostEstimate:
    """:func:`estimate_run` of ``spec``; a spec the dataset cannot run stops the page."""
    with session() as s:
        try:
            return estimate_run(spec, session=s)
        except ValueError as exc:
            st.error(escape_markdown(str(exc)))
            st.stop()


st.markdown("**Estimate**")
per_item = {"direct": 1, "apoc": 2}.get(protocol, int(k) * int(executions))
planned = (limit_items or dataset.n_items) * per_item
if planned <= ESTIMATE_AT_ONCE_CALLS:
    show_estimate(estimated(spec))
elif st.session_state.get(ESTIMATE_KEY, (None,))[0] == spec:
    show_estimate(st.session_state[ESTIMATE_KEY][1])
elif st.button(
    f"Estimate the {planned:,} planned calls",
    icon=":material/calculate:",
    key="runs_estimate",
    help="Renders every planned prompt to find what the cache answers and to count tokens: "
    "seconds per hundred thousand calls. A run under a cost cap checks its estimate itself.",
):
    st.session_state[ESTIMATE_KEY] = (spec, estimated(spec))
    show_estimate(st.session_state[ESTIMATE_KEY][1])
if backend == "simulated":
    st.caption(f"Simulated judge: free and offline; {SIMULATED_NOTE}.")

with session() as s:
    existing = get_run(spec.run_name, session=s)
    conflict = None if existing is None else settings_conflict(existing, spec, session=s)
needs_key = own_key_needed(actor, backend, base_url) and not own_key
problem = (
    ("give a key for this run" if needs_key else None)
    or (None if own_key else unavailable)
    or conflict
    or (None if model else "give a model name")
)
if conflict:
    st.error(f"{conflict}: use the same settings to resume it, or another run name.")
if st.button(
    "Start run",
    type="primary",
    disabled=problem is not None,
    icon=":material/play_arrow:",
    key="runs_start",
    help=problem,
):
    try:
        start_run(engine(), spec, actor=actor, api_key=own_key, max_cost=cap or None)
    except (ValueError, AccessDeniedError) as exc:
        st.error(escape_markdown(str(exc)))


def show_outcome(name: str, report: RunReport) -> None:
    """What a finished background run did, with the stored run's summary (none if deleted since)."""
    with session_scope(engine()) as s:  # what every page reads, stored for the run's revision
        run = get_run(name, session=s)
        if run is not None:
            keep_results(run, session=s)
        summary = None if run is None else run_summary(run, session=s)
    if summary is None:
        st.caption("Run deleted since: its summary is gone.")
        return
    done = summary["this_invocation"] = report.as_dict()
    cols = st.columns(5)
    cols[0].metric("Items", f"{summary['items']:,}")
    cols[1].metric(
        "Attempts", f"{done['attempts']:,}", help="Requests sent to the judge, retries included"
    )
    cols[2].metric("Cache hits", f"{done['cache_hits']:,}")
    cols[3].metric("Failures", f"{done['failures']:,}")
    priced = summary["cost_usd"] != UNPRICED  # this invocation's share, when the run's is known
    cols[4].metric("Cost", cost_text(done["cost_usd"] if priced else None))
    if "accuracy" in summary:
        accuracy = summary["accuracy"]
        st.caption(
            f"Against gold: direct {100 * accuracy['direct_accuracy']:.1f}%, "
            f"consensus {100 * accuracy['method_accuracy']:.1f}% "
            f"({accuracy['delta_points']:+.1f} pts)."
        )
    if summary.get("note"):
        st.caption(summary["note"])
    with st.expander("Summary"):
        st.json(summary)


def progress_panel(drawn: dict[str, str]) -> None:
    """Live progress of this dataset's background runs. While one is going it refreshes every
    :data:`PROGRESS_INTERVAL_S` seconds, and reruns the whole app (the tables above, the
    sidebar) when a run's status differs from ``drawn``, the statuses the page was drawn with:
    a run that starts or ends shows without a reload."""
    snapshots = background_runs(engine(), dataset.name)
    if {p.name: p.status for p in snapshots} != drawn:
        st.rerun(scope="app")
    if snapshots:
        st.markdown("**Started from this server**")
    for progress in reversed(snapshots):
        with st.container(border=True):
            st.markdown(f"**{escape_markdown(progress.name)}** — {progress.status}")
            st.progress(
                progress.fraction,
                text=f"{progress.done} / {progress.total} calls" if progress.total else None,
            )
            if progress.error is not None:  # set when the run failed
                st.error(escape_markdown(progress.error))
            if progress.report is not None:
                show_outcome(progress.name, progress.report)


started = background_runs(engine(), dataset.name)
live = any(p.active for p in started)
st.fragment(progress_panel, run_every=PROGRESS_INTERVAL_S if live else None)(
    {p.name: p.status for p in started}
)

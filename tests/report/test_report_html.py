"""The HTML report: self-contained, every figure embedded and written as PNG, every table as CSV, text escaped."""

from __future__ import annotations

import base64
import json
import shutil
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest

from archpool.report import write_report

FIGURES = {"verdict_effects", "accuracy_by_length", "attention", "effects", "scores_by_run", "predictor_r2", "target_vs_count"}
PNG = b"\x89PNG\r\n\x1a\n"


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


@pytest.fixture(scope="module")
def report(tmp_path_factory, pool_dir):
    return write_report(pool_dir, tmp_path_factory.mktemp("report") / "out", target="helmet", covariates=["seed"])


def test_report_embeds_every_figure_and_writes_png_and_csv(report):
    out = report.parent
    assert {p.stem for p in (out / "figures").glob("*.png")} == FIGURES
    assert {"runs", "predictors", "coefficients", "axis_effects", "interactions", "pairs", "confounds", "excluded"} <= {
        p.stem for p in (out / "tables").glob("*.csv")
    }
    page = _Page()
    page.feed(report.read_text())
    imgs = [a for t, a in page.tags if t == "img"]
    assert {a["alt"] for a in imgs} == FIGURES
    for a in imgs:
        assert a["src"].startswith("data:image/png;base64,")
        assert base64.b64decode(a["src"].split(",", 1)[1]).startswith(PNG)
    assert (out / "figures" / "effects.png").read_bytes().startswith(PNG)
    preds = pd.read_csv(out / "tables" / "predictors.csv")
    assert {"feature_count", "four_axes", "attn_sink_rate"} <= set(preds.predictor)


def test_report_needs_no_network_and_escapes_run_names(report):
    html = report.read_text()
    page = _Page()
    page.feed(html)
    assert not [t for t, _ in page.tags if t in ("script", "link", "iframe", "object")]
    assert not [a for t, a in page.tags if a.get("src", "data:").split(":")[0] not in ("data",)]
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html
    assert "OOM in &lt;b&gt;extend&lt;/b&gt;" in html and "<b>" not in html
    text = "".join(page.text)
    assert "<script>alert('x')</script>" in text  # shown to the reader as text
    assert "NaN loss" in text  # the run that failed only in its status.json is listed
    assert "price_$x$_run" in text


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(
    _chromium() is None,
    reason="no chromium on PATH (make test installs Debian's with "
    "scripts/install_browser.sh when apt-get and root are available)",
)
def test_report_in_headless_chromium_loads_every_image_with_a_clean_console(report, capsys):
    """Driven with playwright through Debian's chromium (``executable_path``; never ``playwright install``)."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
    messages, errors = [], []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: messages.append(f"{m.type}: {m.text}"))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(report.as_uri(), wait_until="load")
            images = page.evaluate("""() => [...document.images].map(i => ({alt: i.alt, complete: i.complete,
                                           w: i.naturalWidth, h: i.naturalHeight}))""")
            scripts = page.evaluate("() => document.querySelectorAll('script').length")
            text = page.inner_text("body")
            first_h2 = page.evaluate("() => document.querySelector('h2').textContent")
            overflow = page.evaluate("""() => [...document.querySelectorAll('table')].filter(
                t => t.getBoundingClientRect().right > document.documentElement.clientWidth + 1).length""")
            shot = report.parent / "screenshot.png"
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    broken = [i["alt"] for i in images if not (i["complete"] and i["w"] > 0 and i["h"] > 0)]
    with capsys.disabled():  # shown in CI's log even under -q
        print(
            f"\nbrowser check ({_chromium()}): {len(images)} images, {len(images) - len(broken)} loaded "
            f"(naturalWidth > 0), {len(messages)} console messages, {len(errors)} page errors, {scripts} script "
            f"elements, {overflow} tables wider than the page; screenshot {shot.stat().st_size} bytes"
        )
    assert {i["alt"] for i in images} == FIGURES and not broken
    assert not messages and not errors
    assert scripts == 0
    assert first_h2 == "Verdict"
    assert overflow == 0
    assert "<script>alert('x')</script>" in text and "price_$x$_run" in text  # hostile names shown as text
    assert shot.read_bytes().startswith(PNG)


# ----------------------------------------------------------------------------------------------- verdict
def _section(html: str) -> str:
    page = _Page()
    page.feed(html[html.index('<section class="verdict"') : html.index("</section>")])
    return " ".join(" ".join(page.text).split())


def _text(html: str) -> str:
    page = _Page()
    page.feed(html)
    return " ".join(" ".join(page.text).split())


def test_verdict_comes_first_with_one_row_per_axis(report):
    html = report.read_text()
    assert html.index("<h2>Verdict</h2>") < html.index("<h2>Figures</h2>") < html.index("<figure")
    text = _section(html)
    assert text.startswith(
        "Verdict Question: how much does each of QK-norm, GQA, SWA and short pretraining context change helmet"
    )
    assert "Beyond noise and at least ±0.01 (Holm-corrected over the axes):" in text
    assert "Intervals and tests rest on seed means" in text  # no answers table beside this results.csv
    for name in ("QK-norm", "GQA", "SWA", "short pretraining context"):
        assert (
            f'id="verdict-{dict(zip(("QK-norm", "GQA", "SWA", "short pretraining context"), ("qk_norm", "gqa", "swa", "short_ctx")))[name]}"'
            in html
        )
    v = pd.read_csv(report.parent / "tables" / "verdict.csv")
    assert list(v.feature) == ["qk_norm", "gqa", "swa", "short_ctx"]
    assert v.beyond_noise.all() and (v.claim == "effect").all() and (v.after < 0).all()  # −5 each, noise 1, 2 seeds
    findings = pd.read_csv(report.parent / "tables" / "findings.csv")
    assert set(findings.axis) == {"QK-norm", "GQA", "SWA", "short pretraining context"}
    assert np.allclose(sorted(v.after), sorted(findings.effect))  # the same matched-pair effects


def test_statistics_explain_the_count_fit_and_collapse_long_tables(report):
    html = report.read_text()
    text = _text(html)
    assert "The feature count explains helmet with R²" in text and "leave-one-architecture-out" in text
    assert "It rests on 16 architectures" in text
    assert "full factorial design" in text
    assert "<details><summary>Every predictor known before extension (p Holm-corrected over this table) (" in html
    known = pd.read_csv(report.parent / "tables" / "predictors_before_extension.csv")
    assert set(known.loc[known.kind == "metric", "phase"]) == {"pre"} and known["n"].notna().all()
    assert (known.p_holm.dropna() >= known.p.dropna() - 1e-12).all()
    assert "<h3>Best predictors measured before extension</h3>" in html


def test_pre_extension_predictors_are_reported_and_labelled(report):
    html = report.read_text()
    r = json.loads((report.parent / "analysis.json").read_text())
    pre = r["pre_extension"]
    from archpool.analysis.summary import phase

    assert pre and all(phase(p["predictor"]) == "pre" for p in pre)
    assert f"the best predictor of helmet is {pre[0]['predictor']} (pre-extension)" in _text(html)
    table = pd.read_csv(report.parent / "tables" / "pre_extension.csv")
    assert list(table["pre-extension predictor"]) == [p["predictor"] for p in pre]
    preds = pd.read_csv(report.parent / "tables" / "predictors.csv")
    assert set(preds.loc[preds.kind == "metric", "phase"]) <= {"pre", "post"}


def test_findings_for_several_targets_flip_for_lower_is_better_and_report_results_against_the_paper(tmp_path, table):
    df = table(seeds=3, noise=0.5, rng_seed=3)
    df["longppl@512"] = 20 - 0.4 * df["helmet"]  # lower is better: the features raise it (the paper's direction)
    df["kv_recall_acc@512"] = 100 - df["helmet"]  # features *raise* it: against the paper
    df["ruler_noise"] = np.random.default_rng(0).standard_normal(len(df))
    df.to_csv(tmp_path / "results.csv", index=False)
    page = write_report(
        tmp_path / "results.csv",
        tmp_path / "r",
        "helmet",
        None,
        (),
        findings_targets=["longppl@512", "kv_recall_acc@512", "ruler_noise"],
    )
    f = json.loads((tmp_path / "r" / "analysis.json").read_text())["findings"]
    text = " ".join(s for t in f["targets"] for s in t["sentences"])
    assert "SWA raises longppl@512 (lower is better) by" in text
    assert "<summary>Every metric the pool names, by axis (" in page.read_text()
    by = {t["metric"]: {a["feature"]: a for a in t["axes"]} for t in f["targets"]}
    assert [t["metric"] for t in f["targets"]] == ["helmet", "longppl@512", "kv_recall_acc@512", "ruler_noise"]
    assert all(a["paper_direction"] == "same" and a["above_noise"] for a in by["longppl@512"].values())
    assert all(a["paper_direction"] == "opposite" and a["above_noise"] for a in by["kv_recall_acc@512"].values())
    assert "SWA raises kv_recall_acc@512 (higher is better)" in text and "Opposite to the paper's direction" in text
    assert not any(a["above_noise"] for a in by["ruler_noise"].values())
    assert "not resolved (neither beyond noise nor ruled out" in text
    lo, hi = by["helmet"]["swa"]["ci95"]
    assert lo < by["helmet"]["swa"]["effect"] < hi < 0  # true effect −5 with noise 0.5
    assert lo < -5 < hi or abs(by["helmet"]["swa"]["effect"] + 5) < 1


def test_small_pool_gets_a_small_n_warning_and_merged_identical_columns(tmp_path, table):
    df = table(seeds=1, rng_seed=1)
    df = df[(df.qk_norm == "none") & (df.pretrain_ctx == 8192) & ~((df.swa == 1) & (df.n_kv_heads == 8))].reset_index(drop=True)
    assert len(df) == 3
    df["kv_recall_ll@128"] = np.arange(3.0)
    df["tiny_ll@128"] = df["kv_recall_ll@128"]  # the same measurement under two names
    for i in range(8):
        df[f"m{i}"] = np.random.default_rng(i).standard_normal(3)
    df.to_csv(tmp_path / "results.csv", index=False)
    page = write_report(tmp_path / "results.csv", tmp_path / "r", "helmet")
    html = page.read_text()
    text = _section(html)
    assert "Small sample: 3 runs" in text and "R² near 1 by chance" in text
    assert 'id="small-n-warning"' in html
    preds = pd.read_csv(tmp_path / "r" / "tables" / "predictors.csv")
    assert "kv_recall_ll@128 (= tiny_ll@128)" in set(preds.predictor)
    assert not any(p == "tiny_ll@128" for p in preds.predictor)
    assert "Identical metric columns merged" in html


def test_figures_legend_grammar_dots_without_zero_and_explained_star(pool_dir):
    from archpool.analysis import analyze, load_results
    from archpool.report import figures as figs

    r = analyze(load_results(pool_dir), "helmet", None, ())
    fig = figs.scores_by_run(r)
    ax = fig.axes[0]
    assert ax.get_legend() is None  # 17 architectures: colours would repeat, so no legend
    few = dict(r, runs=[x for x in r["runs"] if x["run"].startswith(("pre_32kv_8k_SWA", "LQK_8kv_4k_s"))])
    labels = [t.get_text() for t in figs.scores_by_run(few).axes[0].get_legend().get_texts()]
    assert sorted(labels) == ["LQK_8kv_4k", "pre_32kv_8k_SWA"]  # one entry per architecture, seeds merged
    lo, hi = ax.get_xlim()
    assert lo > 0 and not ax.patches  # helmet ≈ 25..50: the axis excludes 0, so dots, not bars from 0
    r2 = dict(r, runs=[dict(x, target=x["target"] - 40) for x in r["runs"]])  # values around 0: bars from 0
    ax2 = figs.scores_by_run(r2).axes[0]
    assert ax2.patches and ax2.get_xlim()[0] <= 0 <= ax2.get_xlim()[1]
    eff = figs.effects(r)
    assert "★" in eff.axes[1].get_title() and "stressed" in eff.axes[1].get_title()


def test_compounding_and_the_markdown_summary(tmp_path, table):
    df = table(seeds=3, noise=0.5, swa_gqa=-4.0, rng_seed=5)
    df.to_csv(tmp_path / "results.csv", index=False)
    page = write_report(tmp_path / "results.csv", tmp_path / "r", "helmet")
    comp = pd.read_csv(tmp_path / "r" / "tables" / "compounding.csv")
    assert len(comp) == 6 and set(comp.columns) >= {"pair", "interaction (pair − sum)", "p_holm", "verdict"}
    by_pair = dict(zip(comp.pair, comp.verdict))
    assert by_pair["GQA + SWA"] == "super-additive"  # the −4 built into the table: more than the sum of its parts
    assert by_pair["QK-norm + GQA"] != "super-additive"
    assert 'id="compounding"' in page.read_text()
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert summary.startswith("Target `helmet`") and "| axis | after extension (95% CI) |" in summary
    # every architecture against the baseline, paired by seed: the per-architecture table's column
    arch = pd.read_csv(tmp_path / "r" / "tables" / "architectures.csv").set_index("arch")
    assert arch["vs baseline"].isna().sum() == 1 and arch["vs baseline"].notna().sum() == 15
    r = json.loads((tmp_path / "r" / "analysis.json").read_text())
    all4 = next(x for x in r["versus_baseline"] if len(x["features"]) == 4)["effect"]
    assert all4["mean"] == pytest.approx(-20 - 4, abs=1.5)  # four features at −5 each and the −4 SWA × GQA term

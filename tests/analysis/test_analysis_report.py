"""The HTML report: self-contained, every figure embedded and written as PNG, every table as CSV, text escaped."""
from __future__ import annotations

import base64
import shutil
import subprocess
from html.parser import HTMLParser

import pandas as pd
import pytest

from archpool.report import write_report

FIGURES = {"scores_by_run", "predictor_r2", "target_vs_count", "effects", "by_length", "attention"}
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
    assert {"runs", "predictors", "coefficients", "axis_effects", "interactions", "pairs", "confounds",
            "excluded"} <= {p.stem for p in (out / "tables").glob("*.csv")}
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
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "OOM in &lt;b&gt;extend&lt;/b&gt;" in html and "<b>" not in html
    text = "".join(page.text)
    assert "<script>alert('x')</script>" in text  # shown to the reader as text
    assert "NaN loss" in text  # the run that failed only in its status.json is listed
    assert "price_$x$_run" in text


@pytest.mark.skipif(not (shutil.which("chromium") or shutil.which("chromium-browser")), reason="no headless browser")
def test_report_renders_in_headless_chromium(report):
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    dom = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", report.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    page = _Page()
    page.feed(dom)
    assert {a.get("alt") for t, a in page.tags if t == "img"} == FIGURES
    assert not [t for t, _ in page.tags if t == "script"]
    assert "<script>alert('x')</script>" in "".join(page.text)

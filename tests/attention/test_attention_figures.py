"""Pool figures: sink vs score with R², entropy vs sink by QK-norm, per-layer profiles."""

import pytest

from archpool.attention.figures import entropy_vs_sink, linear_fit, per_layer_profiles, png, save_figures, sink_vs_score


def rows():
    return [
        {"run": "a", "qk_norm": "none", "attn_sink_rate": 80.0, "attn_entropy_norm": 0.4, "score": 30.0},
        {"run": "b", "qk_norm": "layerwise", "attn_sink_rate": 40.0, "attn_entropy_norm": 0.6, "score": 50.0},
        {"run": "c", "qk_norm": "headwise", "attn_sink_rate": 60.0, "attn_entropy_norm": 0.5, "score": 35.0},
        {"run": "d", "qk_norm": "layerwise", "attn_sink_rate": None, "attn_entropy_norm": 0.7, "score": 55.0},
    ]


def test_linear_fit_r2_matches_the_definition():
    x, y = [1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 5.0]
    fit = linear_fit(x, y)
    my = sum(y) / 4
    pred = [fit["intercept"] + fit["slope"] * v for v in x]
    r2 = 1 - sum((a - b) ** 2 for a, b in zip(y, pred)) / sum((a - my) ** 2 for a in y)
    assert fit["r2"] == pytest.approx(r2) and fit["n"] == 4
    assert linear_fit([1.0, 2.0], [1.0, 2.0]) is None


def test_sink_vs_score_titles_r2_over_runs_with_both_values():
    fig = sink_vs_score(rows(), "score")
    title = fig.axes[0].get_title()
    fit = linear_fit([80.0, 40.0, 60.0], [30.0, 50.0, 35.0])
    assert f"R² = {fit['r2']:.2f}, n = 3" in title
    assert png(fig)[:4] == b"\x89PNG"


def test_entropy_vs_sink_colours_by_qk_norm_and_profiles_draw_layers(tmp_path):
    fig = entropy_vs_sink(rows())
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["QK-norm: headwise", "QK-norm: layerwise", "QK-norm: none"]
    summary = {
        "name": "x",
        "model": {"qk_norm": "none"},
        "metrics": {"attn_sink_rate": 50.0},
        "per_layer": {
            "sink_rate": [10.0, 90.0],
            "first_token_mass": [0.1, 0.8],
            "entropy_norm": [0.9, 0.3],
            "layer_types": ["sliding_attention", "full_attention"],
        },
    }
    prof = per_layer_profiles([summary])
    assert list(prof.axes[0].lines[0].get_ydata()) == [10.0, 90.0]
    paths = save_figures([summary], tmp_path, scores={"x": 1.0})
    assert sorted(p.name for p in paths) == [
        "attention_entropy_vs_sink.png",
        "attention_layers.png",
        "attention_sink_vs_score.png",
    ]

"""The config base: unknown keys with did-you-mean, Literal choices, nested paths, round trips."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archpool.config import Config, check_keys
from archpool.errors import ConfigError
from archpool.model.config import ModelConfig
from archpool.model.presets import FAMILIES, SIZES
from archpool.train.config import ExtensionConfig, RunConfig, TrainConfig


@dataclass
class Inner(Config):
    PATH = "inner"

    lr: float = 1.0
    mode: Literal["fast", "slow"] = "fast"

    def validate(self) -> None:
        if not self.lr > 0:
            raise ConfigError(f"{self.PATH}.lr", f"must be > 0, got {self.lr}")


@dataclass
class Outer(Config):
    name: str = "x"
    inner: Inner = field(default_factory=Inner)
    stages: list[Inner] = field(default_factory=list)
    by_name: dict[str, Inner] = field(default_factory=dict)


def run_dict(**sections) -> dict:
    return {"model": {"d_model": 32, "n_layers": 2, "n_heads": 4, "vocab_size": 300}, "train": {"max_steps": 1}, **sections}


def test_unknown_key_names_the_path_the_closest_key_and_the_allowed_keys():
    with pytest.raises(ConfigError) as err:
        RunConfig.from_dict(run_dict(train={"lrr": 0.1, "max_steps": 1}))
    assert err.value.field == "train.lrr"
    assert "did you mean 'lr'?" in err.value.message and "allowed: lr, final_lr_ratio" in err.value.message
    with pytest.raises(ConfigError, match=r"^inner\.mod: unknown field; did you mean 'mode'\?"):
        Outer.from_dict({"inner": {"mod": "slow"}})
    with pytest.raises(ConfigError, match=r"^stages\[1\]\.lrr: unknown field; did you mean 'lr'\?"):
        Outer.from_dict({"stages": [{}, {"lrr": 2.0}]})
    with pytest.raises(ConfigError, match=r"^by_name\.a\.zz: unknown field; allowed: lr, mode$"):
        Outer.from_dict({"by_name": {"a": {"zz": 1}}})


def test_check_keys_without_a_close_key_lists_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"^pool\.qqq: unknown setting; allowed: alpha, beta$"):
        check_keys({"alpha": 1, "qqq": 2}, ["alpha", "beta"], "pool", "setting")
    check_keys({"alpha": 1}, ["alpha", "beta"], "pool")


def test_a_non_mapping_is_refused_at_its_path():
    with pytest.raises(ConfigError, match=r"^inner: expected a mapping, got \[1\]"):
        Outer.from_dict({"inner": [1]})
    with pytest.raises(ConfigError, match=r"^run: expected a mapping"):
        RunConfig.from_dict([1])


def test_literal_fields_take_one_of_their_values():
    assert Outer.from_dict({"inner": {"mode": "slow"}}).inner.mode == "slow"
    with pytest.raises(ConfigError, match=r"^inner\.mode: unknown mode 'medium'; allowed: fast, slow$"):
        Outer.from_dict({"inner": {"mode": "medium"}})
    with pytest.raises(ConfigError, match=r"^train\.schedule: unknown schedule 'step'"):
        TrainConfig.from_dict({"schedule": "step", "max_steps": 1})
    with pytest.raises(ConfigError, match=r"^extension\.recipe: unknown recipe 1; allowed: ntk, abf, yarn, pi"):
        ExtensionConfig.from_dict({"recipe": 1})


def test_literal_inside_a_union_is_described_as_its_choices():
    @dataclass
    class Choice(Config):
        mode: Literal["a", "b"] | None = None

    assert Choice.from_dict({"mode": None}).mode is None
    with pytest.raises(ConfigError, match=r"^mode: expected one of 'a', 'b' or null, got 'c'"):
        Choice.from_dict({"mode": "c"})


def test_errors_of_nested_sections_carry_their_full_path():
    with pytest.raises(ConfigError) as err:
        RunConfig.from_dict(run_dict(extension=[{"recipe": "ntk"}, {"name": "b", "theta_ratio": -1.0}]))
    assert err.value.field == "extension[1].theta_ratio" and "must be > 0" in err.value.message
    with pytest.raises(ConfigError) as err:
        RunConfig.from_dict(run_dict(model={"d_model": 32, "rope": {"thetta": 10.0}}))
    assert err.value.field == "model.rope.thetta" and "did you mean 'theta'?" in err.value.message
    with pytest.raises(ConfigError, match=r"^inner\.lr: must be > 0"):
        Outer.from_dict({"inner": {"lr": -1.0}})
    with pytest.raises(ConfigError, match=r"^stages\[0\]\.lr: must be > 0"):
        Outer.from_dict({"stages": [{"lr": -1.0}]})


def test_a_directly_built_config_names_errors_under_its_section():
    with pytest.raises(ConfigError, match=r"^train\.lr: must be > 0"):
        TrainConfig(lr=-1.0, max_steps=1)
    with pytest.raises(ConfigError, match=r"^stage\.lr: must be > 0"):
        TrainConfig.from_dict({"lr": -1.0, "max_steps": 1}, "stage")


def test_under_prefixes_the_field_and_keeps_the_message():
    e = ConfigError("lr", "must be > 0")
    assert str(e.under("train")) == "train.lr: must be > 0"
    assert e.under("train").message == "must be > 0"
    assert ConfigError("[1].lr", "m").under("extension").field == "extension[1].lr"
    assert e.under("").field == "lr"
    assert str(ConfigError(None, "m").under("pool")) == "pool.None: m"


def test_to_dict_round_trips():
    outer = Outer.from_dict({"name": "y", "inner": {"lr": 2.0}, "stages": [{"mode": "slow"}], "by_name": {"a": {}}})
    assert Outer.from_dict(outer.to_dict()) == outer
    train = TrainConfig.from_dict({"lr": "3e-4", "max_steps": 5, "betas": [0.8, 0.9]})
    assert train.lr == 3e-4 and TrainConfig.from_dict(train.to_dict()) == train
    ext = ExtensionConfig.from_dict({"recipe": "yarn", "factor": 4.0, "full_layers_only": True})
    assert ExtensionConfig.from_dict(ext.to_dict()) == ext


PRESETS = [(family, size) for family in FAMILIES for size in SIZES]


@settings(max_examples=40, deadline=None)
@given(
    preset=st.sampled_from(PRESETS),
    n_kv_divisor=st.sampled_from([1, 2, 4]),
    qkv_bias=st.booleans(),
    theta=st.floats(min_value=1.0, max_value=1e7, allow_nan=False),
)
def test_model_config_round_trips_through_to_dict(preset, n_kv_divisor, qkv_bias, theta):
    family, size = preset
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = ModelConfig.preset(family, size=size)
        heads = base.n_heads
        kv = heads // n_kv_divisor if heads % n_kv_divisor == 0 else heads
        cfg = base.replace(n_kv_heads=kv, qkv_bias=qkv_bias, rope={**base.to_dict()["rope"], "theta": theta})
        again = ModelConfig.from_dict(cfg.to_dict())
    assert again == cfg
    assert again.to_dict() == cfg.to_dict()

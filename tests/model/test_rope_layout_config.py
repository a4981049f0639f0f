"""The RoPE-layout check reads a model directory's config.json through the bounded loader: any bytes there
give a named error or a value, never another exception."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archpool.errors import CheckpointError, ConfigError, DataError
from archpool.model.rope_layout import check_rope_layout

NAMED = (ConfigError, CheckpointError, DataError)  # every named error of archpool


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=200), st.sampled_from([b"[]", b"null", b"42", b'"x"', b"{", b"{}", b'{"a": 1, "a": 2}'])))
def test_any_config_bytes_give_a_named_error_or_a_layout(tmp_path, raw):
    (tmp_path / "config.json").write_bytes(raw)
    try:
        info = check_rope_layout(tmp_path)
    except NAMED as e:
        assert str(tmp_path) in str(e)  # the error names the file or the directory
    else:  # a config that declares its layout needs no weights
        assert info["declared"] is True


def test_a_config_that_is_not_an_object_is_named(tmp_path):
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"config\.json.*a JSON object expected, got list"):
        check_rope_layout(tmp_path)

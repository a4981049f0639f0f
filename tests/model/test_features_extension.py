"""The pretraining context of an extended archpool model is the one ``archpool extend`` recorded."""

from archpool.model.config import ModelConfig
from archpool.model.features import features_from_config
from archpool.train.config import ExtensionConfig, TrainConfig
from archpool.train.extend import plan_extension


def test_ntk_extended_checkpoint_reports_its_pretraining_context():
    base = ModelConfig.preset("llama3", size="tiny", max_seq_len=128)
    train = TrainConfig.from_dict({"seq_len": 128, "max_steps": 10, "global_batch_tokens": 1024})
    plan = plan_extension(base, train, ExtensionConfig.from_dict({"recipe": "ntk", "length": 512}), "final")
    assert plan.model.max_seq_len == 512 and plan.model.extension["pretrain_seq_len"] == 128
    f = features_from_config(plan.model, short_ctx=256)
    assert f["pretrain_ctx"] == 128
    assert f["short_ctx"] is True


def test_features_of_a_run_directory_read_its_final_checkpoint(tmp_path):
    from archpool.model.checkpoint import save_checkpoint
    from archpool.model.features import features
    from archpool.model.model import Decoder

    base = ModelConfig.preset("olmo3", size="tiny", max_seq_len=128)
    train = TrainConfig.from_dict({"seq_len": 128, "max_steps": 10, "global_batch_tokens": 1024})
    extended = plan_extension(base, train, ExtensionConfig.from_dict({"recipe": "ntk", "length": 512}), "final").model
    run = tmp_path / "run"
    save_checkpoint(Decoder(extended), run / "milestones" / "final")
    (run / "run_config.json").write_text("{}")
    f = features(str(run))
    assert f["pretrain_ctx"] == 128 and f["qk_norm"] == "layerwise" and f["swa"] is True


def test_features_of_an_hf_export_of_an_extended_model_keep_its_pretraining_context(tmp_path):
    """The HF config of an NTK-extended export states only the extended context; archpool's config beside it knows more."""
    from archpool.model.features import features
    from archpool.model.hf import export_hf
    from archpool.model.model import Decoder

    base = ModelConfig.preset("llama3", size="tiny", max_seq_len=128)
    train = TrainConfig.from_dict({"seq_len": 128, "max_steps": 10, "global_batch_tokens": 1024})
    extended = plan_extension(base, train, ExtensionConfig.from_dict({"recipe": "ntk", "length": 512}), "final").model
    out = export_hf(Decoder(extended), tmp_path / "hf", require_tokenizer=False)
    f = features(str(out))
    assert f["pretrain_ctx"] == 128 and f["gqa"] is True
    (out / "archpool_config.json").unlink()
    assert features(str(out))["pretrain_ctx"] == 512  # a plain HF config says only this

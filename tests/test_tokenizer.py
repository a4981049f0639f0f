import json

import pytest

from archpool.errors import DataError
from archpool.tokenizer import EOS, Tokenizer, require_tokenizer, train_tokenizer
from tests.helpers.corpus import make_docs


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(make_docs(40), 400)


def test_trained_tokenizer_has_special_ids_and_vocab(tok):
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (0, 1, 2)
    assert 300 < tok.vocab_size <= 400


def test_encode_adds_no_bos_eos_and_round_trips(tok):
    text = "The model reads a long story.\n\n  Indented  line with ünïcödé and tabs\t!"
    ids = tok.encode(text)
    assert tok.bos_id not in ids and tok.eos_id not in ids
    assert tok.decode(ids) == text


def test_special_token_text_in_a_document_is_not_a_control_token(tok):
    ids = tok.encode(f"before {EOS} after")
    assert tok.eos_id not in ids
    assert EOS in tok.decode(ids)


def test_exact_split_encoding_equals_whole_document_encoding(tok):
    docs = make_docs(30, seed=3, long_every=2, long_words=3000)
    docs.append("a\nb\n\nc  \nd\n \ne" * 2000)  # whitespace runs around line breaks
    assert tok.encode_documents(docs) == tok.encode_batch(docs)


def test_training_is_deterministic_and_hash_survives_save_load(tok, tmp_path):
    again = train_tokenizer(make_docs(40), 400)
    assert again.hash == tok.hash
    tok.save(tmp_path)
    loaded_file = Tokenizer.load(tmp_path / "tokenizer.json")
    loaded_dir = Tokenizer.load(tmp_path)
    assert loaded_file.hash == loaded_dir.hash == tok.hash
    assert loaded_file.encode("river mountain") == tok.encode("river mountain")


def test_hf_directory_with_other_special_names(tmp_path):
    from tokenizers import Tokenizer as HF
    from tokenizers import models, pre_tokenizers

    vocab = {"<s>": 0, "</s>": 1, "<pad>": 2, "a": 3, "b": 4, "[UNK]": 5}
    hf = HF(models.WordLevel(vocab, unk_token="[UNK]"))
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    hf.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}))
    t = Tokenizer.load(tmp_path)
    assert (t.bos_id, t.eos_id, t.pad_id) == (0, 1, 2)
    assert t.encode("a b a") == [3, 4, 3]


def test_load_errors_name_the_path(tmp_path):
    with pytest.raises(DataError, match="no tokenizer.json"):
        Tokenizer.load(tmp_path)
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    with pytest.raises(DataError, match=str(bad)):
        Tokenizer.load(bad)


def test_require_tokenizer_refuses_a_different_hash(tok):
    require_tokenizer(tok.hash, tok)  # same: fine
    require_tokenizer(None, tok)  # nothing recorded yet: fine
    with pytest.raises(DataError, match="differs from the recorded"):
        require_tokenizer("0" * 64, tok)


def test_vocab_too_small_is_an_error():
    with pytest.raises(DataError, match="vocab_size"):
        train_tokenizer(["abc"], 100)

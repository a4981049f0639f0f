"""Data stage: the embedded corpus and other sources → a byte-level BPE tokenizer → a content-addressed,
tokenised store → deterministic packed streams; plus a run's typed ``data:`` section (``section.py``)."""

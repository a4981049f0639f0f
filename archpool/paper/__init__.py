"""The paper's published results as package data, and what can be read from them without compute.

:mod:`archpool.paper.table` loads the 26-run table (docs/paper-results.md: provenance and the known
transcription error); :mod:`archpool.paper.screen` turns a model's four features into the paper's
estimate (``archpool features MODEL --predict``). Neither imports torch nor any pipeline stage.
"""

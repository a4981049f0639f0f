import os

import pytest
import torch

torch.set_num_threads(min(2, os.cpu_count() or 1))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("ARCHPOOL_BACKENDS", "toy_backend")  # the pool tests' stage test double (tests/pool)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)

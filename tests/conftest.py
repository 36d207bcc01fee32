import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

torch.set_num_threads(2)


def pytest_collection_modifyitems(config, items):
    """Tests marked cuda need a CUDA device: skipped where none is visible (CI has none)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device is visible")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray for every test that needs it (starting one takes seconds); main.py, finding
    it started, uses it and leaves it running."""
    ray = pytest.importorskip("ray")
    import utils_apex

    utils_apex.start_ray(None, cpus=2)
    yield
    ray.shutdown()

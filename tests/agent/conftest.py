import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def scan(tmp_path):
    """A small grey image with a bright blob."""
    img = np.zeros((96, 96), np.uint8)
    cv2.circle(img, (48, 48), 36, 150, -1)
    cv2.circle(img, (34, 40), 6, 255, -1)
    path = tmp_path / "scan.png"
    cv2.imwrite(str(path), img)
    return path

"""The tools tests share helpers from this folder (`replies`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

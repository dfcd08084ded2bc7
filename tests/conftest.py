import sys
from pathlib import Path

# tests import small helpers (tablebuilder) from this folder
sys.path.insert(0, str(Path(__file__).parent))

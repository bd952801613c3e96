"""The public home of the exceptions (docs/DESIGN.md §7: ``from stores.errors import …``).

They are defined with the rest of the IQv2 model in ``stores.iqv2.errors``;
this module only gives them the short, documented import path.
"""

from __future__ import annotations

from .iqv2.errors import *  # noqa: F403 - the public re-export is the point of this module
from .iqv2.errors import __all__ as __all__  # noqa: PLC0414

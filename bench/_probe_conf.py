"""gunicorn settings for `search_profile.py`: the product's (`memory_admin/gunicorn_conf.py`) plus the
timing probes of `_probe.py` in each worker."""

import sys
from pathlib import Path

from memory_admin import gunicorn_conf as _product
from memory_admin.gunicorn_conf import *  # noqa: F403

sys.path.insert(0, str(Path(__file__).resolve().parent))


def post_worker_init(worker):
    _product.post_worker_init(worker)
    import _probe

    _probe.install(worker)

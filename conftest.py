"""Make the checkout importable as ``ansible_collections.gpufleet.lifecycle`` for pytest.

The collection root is this folder; Python needs it under an
``ansible_collections/<namespace>/<name>`` path.  A symlink inside the ignored
``build/`` folder provides that path without asking anyone to clone into a
special location.
"""
import os
import sys

_ROOT = os.path.dirname(os.path.abspath(__file__))
_COLLECTIONS = os.path.join(_ROOT, 'build', 'collections')
_LINK = os.path.join(_COLLECTIONS, 'ansible_collections', 'gpufleet', 'lifecycle')

if not os.path.islink(_LINK):
    os.makedirs(os.path.dirname(_LINK), exist_ok=True)
    os.symlink(os.path.relpath(_ROOT, os.path.dirname(_LINK)), _LINK)
if _COLLECTIONS not in sys.path:
    sys.path.insert(0, _COLLECTIONS)

collect_ignore = ['build', 'tests/output', '.venv', '.venv-216']

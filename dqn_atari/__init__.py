"""The project's modules under one name, ``dqn_atari``, so that they shadow nothing and nothing shadows them
(``from dqn_atari import dqn``; the modules import each other as ``dqn_atari.utils_run``, never as a bare
``utils_run`` that a user's own file of that name could be).

In a checkout the modules stay where they are, in the folder above this one, and ``python main.py`` runs there:
this file only gives them the package's name. An installed copy (``pip install .``) is a folder of its own with
the modules in it (pyproject.toml), which needs no such file.
"""

from pathlib import Path

__path__ = [str(Path(__file__).resolve().parent.parent)]

"""The models the notebooks saved in notebooks/models, diagnosed healthy by
the doctor.  Part of the notebook run: pytest collects this file after the
notebooks of this folder (testpaths runs notebooks/ first), so the models
are there; tests/ alone does not need them."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from test_deploy import NOTEBOOK_MODELS, notebook_models  # noqa: E402
from test_doctor import assert_healthy  # noqa: E402


def test_notebook_models_are_healthy(capsys):
    paths = [Path(item["model"]) for item in notebook_models()]
    assert paths, f"no model using the custom domain in {NOTEBOOK_MODELS}: the notebooks of " \
                  "this folder save them; run them in the same pytest run, before this file"
    assert_healthy(paths)
    with capsys.disabled():
        print(f"\ndoctor: {len(paths)} models from notebooks/models healthy")

"""The research notebooks: committed without outputs, identical to their generator, and each runs
top to bottom in a fresh kernel (the embedded model on CPU) without an error."""

import importlib.util
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
CELL_TIMEOUT_S = 300


def generator():
    spec = importlib.util.spec_from_file_location("build_notebooks", NOTEBOOKS / "build_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NAMES = sorted(generator().NOTEBOOKS)


def test_every_notebook_is_generated_and_committed_clean():
    build = generator()
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == NAMES
    for name in NAMES:
        nb = nbformat.read(NOTEBOOKS / name, as_version=4)
        nbformat.validate(nb)
        # compare content, not formatting (another nbformat version may lay the JSON out differently)
        want = nbformat.reads(build.render(name), as_version=4)
        assert [(c.cell_type, c.source) for c in nb.cells] == [(c.cell_type, c.source) for c in want.cells], (
            f"{name} differs from build_notebooks.py: rerun it")
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, name


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom(name, tmp_path, monkeypatch):
    from nbclient import NotebookClient

    # One torch thread in the kernel: on a busy 2-core machine two spinning BLAS threads per
    # process slow the run down severalfold; on an idle one the single thread costs little.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    # a fresh kernel, run in a scratch directory; any cell error fails the test with its traceback
    NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    figures = [o for o in outputs if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    plotting_cells = [c for c in nb.cells if c.cell_type == "code" and ("plot(" in c.source or "plt." in c.source)]
    assert len(figures) >= len(plotting_cells) >= 1, "every plotting cell shows a figure"

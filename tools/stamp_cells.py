"""Write the two cells every notebook in notebooks/ shares (idempotent):

- dpbook.repro.colab.SETUP_CELL as the first code cell (Colab set-up), and
- dpbook.repro.params.CHECK_CELL right after the cell tagged ``parameters`` (papermill's injected cell goes between
  them),

both tagged ``remove-cell``: they matter on Colab and under papermill, not in the rendered book.

    .venv/bin/python tools/stamp_cells.py
"""

from pathlib import Path

import nbformat

from dpbook.repro.colab import SETUP_CELL
from dpbook.repro.params import CHECK_CELL

ROOT = Path(__file__).resolve().parents[1]
TAGS = ["remove-cell"]
SETUP = dict(id="colab-setup", kind="setup", source=SETUP_CELL)
CHECK = dict(id="parameter-check", kind="parameter-check", source=CHECK_CELL)


def _put(nb, index: int, spec: dict) -> bool:
    """Make the cell at ``index`` the stamped cell ``spec`` (replacing an older stamp there, else inserting)."""
    cell = nb.cells[index] if index < len(nb.cells) else None
    if cell is not None and cell.cell_type == "code" and cell.metadata.get("dpbook") == spec["kind"]:
        if cell.source == spec["source"] and cell.id == spec["id"] and cell.metadata.get("tags") == TAGS:
            return False
        cell.source, cell.id, cell.metadata["tags"] = spec["source"], spec["id"], TAGS
        return True
    nb.cells.insert(index, nbformat.v4.new_code_cell(spec["source"], id=spec["id"],
                                                      metadata={"dpbook": spec["kind"], "tags": TAGS}))
    return True


def stamp(path: Path) -> bool:
    nb = nbformat.read(path, as_version=4)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    changed = _put(nb, code[0] if code else len(nb.cells), SETUP)
    parameters = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    if len(parameters) != 1:
        raise ValueError(f"{path.name}: needs exactly one cell tagged 'parameters', has {len(parameters)}")
    changed |= _put(nb, parameters[0] + 1, CHECK)
    ids = [c.id for c in nb.cells]
    if len(ids) != len(set(ids)):
        raise ValueError(f"{path.name}: duplicate cell ids {sorted({i for i in ids if ids.count(i) > 1})}")
    if changed:
        nbformat.write(nb, path)
    return changed


if __name__ == "__main__":
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        print(("stamped " if stamp(notebook) else "unchanged ") + notebook.name)

"""Write dpbook.colab.SETUP_CELL as the first code cell of every notebook in notebooks/ (idempotent).

    .venv/bin/python tools/stamp_setup_cell.py
"""

from pathlib import Path

import nbformat

from dpbook.colab import SETUP_CELL

ROOT = Path(__file__).resolve().parents[1]
CELL_ID = "colab-setup"
# The set-up matters on Colab only: the rendered book leaves the cell (and its output, the build machine's runtime) out.
TAGS = ["remove-cell"]


def stamp(path: Path) -> bool:
    nb = nbformat.read(path, as_version=4)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    first = nb.cells[code[0]] if code else None
    if first is not None and first.metadata.get("dpbook") == "setup":
        if first.source == SETUP_CELL and first.id == CELL_ID and first.metadata.get("tags") == TAGS:
            return False
        first.source, first.id, first.metadata["tags"] = SETUP_CELL, CELL_ID, TAGS
    else:
        cell = nbformat.v4.new_code_cell(SETUP_CELL, id=CELL_ID, metadata={"dpbook": "setup", "tags": TAGS})
        nb.cells.insert(code[0] if code else len(nb.cells), cell)
    ids = [c.id for c in nb.cells]
    if len(ids) != len(set(ids)):
        raise ValueError(f"{path.name}: duplicate cell ids {sorted({i for i in ids if ids.count(i) > 1})}")
    nbformat.write(nb, path)
    return True


if __name__ == "__main__":
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        print(("stamped " if stamp(notebook) else "unchanged ") + notebook.name)

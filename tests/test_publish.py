"""The published book is deployed only from a build that passed every check (``.github/workflows/book.yml``).

The workflow's deploy job must wait for a job that runs ``make check`` (the suite, the book's execution and build, every
page in Chromium) and uploads what that job built; a deploy that does not wait, or a check job that builds the book
without the browser checks, would put a failed build online.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"


def gates(workflow: dict) -> list[str]:
    """Why the workflow could publish a book that failed its checks: one line per problem (none: it cannot)."""
    jobs = workflow["jobs"]
    deploying = [name for name, job in jobs.items() if any("deploy-pages" in s.get("uses", "") for s in job["steps"])]
    if not deploying:
        return ["no job deploys the book (actions/deploy-pages)"]
    problems = []
    for name in deploying:
        needs = jobs[name].get("needs", [])
        needs = [needs] if isinstance(needs, str) else needs
        checked = [n for n in needs if any("make check" in s.get("run", "") for s in jobs[n]["steps"])]
        if not checked:
            problems.append(f"job {name!r} deploys without waiting for a job that runs 'make check'")
        for n in checked:
            steps = jobs[n]["steps"]
            runs = next(i for i, s in enumerate(steps) if "make check" in s.get("run", ""))
            uploads = [i for i, s in enumerate(steps) if "upload-pages-artifact" in s.get("uses", "")]
            if not uploads or uploads[0] < runs or steps[uploads[0]]["with"]["path"] != "_build/html":
                problems.append(f"job {n!r} does not upload _build/html after 'make check'")
    return problems


def test_the_book_is_published_only_after_make_check_passed():
    assert gates(yaml.safe_load(WORKFLOW.read_text())) == []


def test_make_check_includes_the_book_and_the_browser_checks():
    check = next(line for line in (ROOT / "Makefile").read_text().splitlines() if "for stage in" in line)
    assert "test book browser" in check


@pytest.mark.parametrize("mend, problem", [
    (lambda w: w["jobs"]["deploy"].pop("needs"), "deploys without waiting"),
    (lambda w: w["jobs"]["check"]["steps"].pop(2), "deploys without waiting"),  # 'make check' removed
    (lambda w: w["jobs"]["check"]["steps"].insert(1, w["jobs"]["check"]["steps"].pop(3)), "does not upload"),
    (lambda w: w["jobs"].pop("deploy"), "no job deploys"),
])
def test_a_workflow_that_could_publish_a_failed_build_is_caught(mend, problem):
    workflow = yaml.safe_load(WORKFLOW.read_text())
    mend(workflow)
    assert any(problem in line for line in gates(workflow))

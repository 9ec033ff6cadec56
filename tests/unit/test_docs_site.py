"""The docs site builds with warnings as errors (broken links and anchors, pages left out of the
nav) and its nav holds every page under docs/ and nothing else."""

import os
import pathlib
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def nav_pages(entries) -> list[str]:
    """The page paths of a mkdocs nav (nested sections flattened; external links left out)."""
    pages = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        if isinstance(value, list):
            pages += nav_pages(value)
        elif "://" not in value:
            pages.append(value)
    return pages


def config() -> dict:
    # mkdocs.yml may hold !!python/name tags for extensions; none are used, so safe_load reads it
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text())


def test_every_page_is_in_the_nav_once():
    nav = nav_pages(config()["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(set(nav)) == sorted(nav), f"pages twice in mkdocs.yml's nav: {sorted({p for p in nav if nav.count(p) > 1})}"
    assert not set(pages) - set(nav), f"docs pages missing from mkdocs.yml's nav: {sorted(set(pages) - set(nav))}"
    assert not set(nav) - set(pages), f"mkdocs.yml's nav names pages that do not exist: {sorted(set(nav) - set(pages))}"


def test_nav_pages_helper_flattens_sections():
    assert nav_pages([{"Home": "index.md"}, {"SDK": [{"a": "sdk/a.md"}, "b.md"]}, {"x": "https://e.org/"}]) == \
        ["index.md", "sdk/a.md", "b.md"]


def test_site_builds_strict(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", NO_COLOR="1")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
                          "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout}\n{run.stderr}"
    assert (tmp_path / "site" / "index.html").exists()
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()


def test_readme_links_reach_files():
    """README.md is the front page on the repository host, outside the site: its relative links
    must name files that exist."""
    import re
    readme = (ROOT / "README.md").read_text()
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", readme) if "://" not in t]
    assert targets, "README.md links nowhere"
    missing = [t for t in targets if t and not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_hook_unescapes_pipes_in_table_code_only():
    import runpy
    unescape = runpy.run_path(str(ROOT / "scripts" / "mkdocs_hooks.py"))["unescape_table_code"]
    page = "| a | `x\\|y` \\| z |\ntext `x\\|y`\n```\n| `x\\|y` |\n```"
    assert unescape(page) == "| a | `x|y` \\| z |\ntext `x\\|y`\n```\n| `x\\|y` |\n```"


def test_readme_stays_a_front_page():
    """The README is what Quiver is, the two commands, the SDK in one page and links: chapters
    belong on the site."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300, "README.md over 300 lines: move the chapter to a docs/ page"
    for part in ("## The two commands", "bash scripts/up.sh", "bash scripts/test.sh", "## SDK in one page"):
        assert part in readme, part

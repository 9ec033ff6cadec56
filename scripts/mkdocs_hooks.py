"""mkdocs hooks (mkdocs.yml `hooks:`): the pages are written for both the site and the repository
host's Markdown view.

GitHub's tables split cells on every unescaped `|`, code spans included, so the pages write
`\\|` inside a table's code spans; Python-Markdown's tables leave a code span's pipes alone and
would show the backslash. The site gets the bare pipe.
"""

import re

CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def unescape_table_code(markdown: str) -> str:
    out, fence = [], False
    for line in markdown.split("\n"):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and line.lstrip().startswith("|"):
            line = CODE_SPAN.sub(lambda m: m.group(1) + m.group(2).replace("\\|", "|") + m.group(1), line)
        out.append(line)
    return "\n".join(out)


def on_page_markdown(markdown, page, config, files):
    return unescape_table_code(markdown)

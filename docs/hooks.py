"""MkDocs hooks (mkdocs.yml `hooks:`): the README as the site's home page, and repository files
that the pages link to.

The pages are written to read the same on GitHub and on the site: a link to a file of the
repository outside docs/ is a plain relative path (`../deploy/docker-compose.yml`,
`../assets/screenshot.png`). MkDocs knows only docs/, so `on_files` adds every such file that a
page links to (images included) to the site under `_repo/`, and MkDocs then checks and rewrites
those links like any other; a link to a file that does not exist stays a warning, which
`mkdocs build --strict` turns into a failure.

README.md becomes `index.md`, with its links rewritten from the repository root to docs/
(`docs/studio.md` -> `studio.md`, `assets/screenshot.png` -> `../assets/screenshot.png`).

`relative_links` is also what tests/test_docs.py checks every page's links with.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

# [text](target) and ![alt](target), target without spaces; a title ("...") after it is allowed.
LINK = re.compile(r"(!?\[(?:[^\]\[]|\[[^\]]*\])*\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")
FENCE = re.compile(r"^(```|~~~)")
REPO_PREFIX = "_repo/"


def _is_relative(target: str) -> bool:
    return not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^/|^#", target)


def relative_links(markdown: str) -> list[str]:
    """The relative link and image targets of a page, outside fenced code blocks and inline code."""
    found, fenced = [], False
    for line in markdown.split("\n"):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if fenced:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        found += [m.group(2) for m in LINK.finditer(line) if _is_relative(m.group(2))]
    return found


def readme_as_home(readme: str) -> str:
    """README.md's text with its links made relative to docs/ (where index.md pretends to be)."""

    def rewrite(match: re.Match) -> str:
        target = match.group(2)
        if _is_relative(target):
            target = target[len("docs/") :] if target.startswith("docs/") else "../" + target
        return match.group(1) + target + match.group(3)

    out, fenced = [], False
    for line in readme.split("\n"):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
        out.append(line if fenced else LINK.sub(rewrite, line))
    return "\n".join(out)


def on_files(files, config):
    from mkdocs.structure.files import File, InclusionLevel  # here: tests/test_docs.py reads this file without MkDocs

    docs = Path(config.docs_dir)
    readme = docs.parent / "README.md"
    files.append(File.generated(config, "index.md", content=readme_as_home(readme.read_text(encoding="utf-8"))))
    for page in list(files.documentation_pages()):
        text = page.content_string
        for target in relative_links(text):
            path = target.split("#")[0]
            uri = posixpath.normpath(posixpath.join(posixpath.dirname(page.src_uri), path))
            if not uri.startswith("../") or files.get_file_from_path(uri) is not None:
                continue
            source = (docs / uri).resolve()
            if source.is_file() and not uri.endswith(".md"):
                files.append(
                    File(
                        uri,
                        src_dir=str(docs),
                        dest_dir=config.site_dir,
                        use_directory_urls=config.use_directory_urls,
                        dest_uri=REPO_PREFIX + posixpath.relpath(uri, ".."),
                        inclusion=InclusionLevel.INCLUDED,  # not docs/: exclude_docs is not about these
                    )
                )
    return files

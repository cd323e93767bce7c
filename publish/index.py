"""Reading a package index's simple API (PEP 503 pages): which versions it has."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from html.parser import HTMLParser

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from flyconfigs.errors import PublishError

__all__ = ["MAX_PAGE_BYTES", "index_versions"]

MAX_PAGE_BYTES = 16 * 1024 * 1024
"""The most of one simple-API page read; an index sending more is refused."""


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href") or ""
            self.names.append(re.split(r"[#?]", href)[0].rsplit("/", 1)[-1])


def _index_answers(simple_url: str, timeout: float) -> bool:
    """Whether ``simple_url`` itself answers as a page (the simple API's root); its body
    is never read (PyPI's root lists every project)."""
    try:
        with urllib.request.urlopen(simple_url, timeout=timeout) as response:
            return 200 <= int(response.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def index_versions(simple_url: str, name: str, timeout: float = 30.0) -> list[Version]:
    """Every version of ``name`` the index at ``simple_url`` lists.

    Empty only when the index answers and has no such project: a 404 for the project's
    page counts as "no releases" only when the index's root (``simple_url``) answers,
    so a wrong or guessed URL is never taken for an empty index.  Raises
    :class:`PublishError` when the index cannot be reached, is not at ``simple_url``, or
    answers an error."""
    url = f"{simple_url.rstrip('/')}/{canonicalize_name(name)}/"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            raw = response.read(MAX_PAGE_BYTES + 1)
        if len(raw) > MAX_PAGE_BYTES:
            raise PublishError(f"the index at {simple_url} sent more than {MAX_PAGE_BYTES} bytes for {name}")
        page = raw.decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            if _index_answers(simple_url, timeout):
                return []
            raise PublishError(f"no package index at {simple_url}: it answered 404 for {name} and for the index "
                               f"itself; give the index's simple API with --index-url") from None
        raise PublishError(f"the index at {simple_url} answered {exc.code} for {name}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise PublishError(f"cannot reach the index at {simple_url}: {reason}") from None
    parser = _Links()
    parser.feed(page)
    versions = set()
    for file in parser.names:
        try:
            if file.endswith(".whl"):
                versions.add(parse_wheel_filename(file)[1])
            elif file.endswith((".tar.gz", ".zip")):
                versions.add(parse_sdist_filename(file)[1])
        except (InvalidWheelFilename, InvalidSdistFilename):
            continue
    return sorted(versions)

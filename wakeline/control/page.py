"""The control page's HTML, from Jinja2 templates with autoescape on, and its two assets.

`page` is the whole document (the sign-in form, or the board); `board` the part the page's
script swaps in when the feed says something changed. Every value the store or an agent
gave is escaped by the template engine; the page loads nothing but its own stylesheet and
script (`asset`), both served by wakeline.
"""

from __future__ import annotations

from importlib import resources

from jinja2 import Environment, PackageLoader, StrictUndefined

from wakeline.control.board import Board, issue_key, plain_title

ASSETS = {"control.js": "text/javascript; charset=utf-8",
          "control.css": "text/css; charset=utf-8"}
COMMANDS = ("stop", "reset", "retry", "abandon")


class Pages:
    """The templates, loaded once."""

    def __init__(self) -> None:
        self._env = Environment(loader=PackageLoader("wakeline.control", "templates"),
                                autoescape=True, undefined=StrictUndefined,
                                trim_blocks=True, lstrip_blocks=True)
        self._env.globals.update(issue_key=issue_key, plain_title=plain_title, commands=COMMANDS)
        self._assets = {name: resources.files("wakeline.control").joinpath("static", name)
                        .read_bytes() for name in ASSETS}

    def page(self, board: Board | None, *, notice: str = "", error: str = "") -> str:
        """The whole page: the board, or (`board` None) the sign-in form with `error`."""
        return self._env.get_template("page.html").render(board=board, notice=notice,
                                                           error=error)

    def board(self, board: Board) -> str:
        """The board alone, for the page's script."""
        return self._env.get_template("board.html").render(board=board)

    def asset(self, name: str) -> tuple[bytes, str] | None:
        """A static file's bytes and content type; None for any other name."""
        if name not in ASSETS:
            return None
        return self._assets[name], ASSETS[name]
